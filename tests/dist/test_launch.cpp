// Launchers that are not the MPI process group's: torchrun (WORLD_SIZE, RANK, LOCAL_RANK) and
// Slurm (SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID). Where they say more than one process but
// the group has one, `hpcnet train` refuses (exit 2, one line saying how to launch it instead);
// with one process, or HPCNET_DIST=single, it trains as usual.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/dist.h"
#include "src/dist/internal.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// Every variable the launcher checks read (saved, cleared for the test, restored after).
const char* const kLaunchVars[] = {"OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "PMI_SIZE",
                                   "PMI_RANK",
                                   "MPI_LOCALRANKID",
                                   "PMIX_RANK",
                                   "WORLD_SIZE",
                                   "RANK",
                                   "LOCAL_RANK",
                                   "SLURM_NTASKS",
                                   "SLURM_PROCID",
                                   "SLURM_LOCALID",
                                   "SLURM_STEP_ID",
                                   "HPCNET_DIST"};

class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : kLaunchVars) {
      if (const char* v = std::getenv(n)) saved_[n] = v;
      ::unsetenv(n);
    }
  }
  void TearDown() override {
    for (const char* n : kLaunchVars) ::unsetenv(n);
    for (auto& [n, v] : saved_) ::setenv(n.c_str(), v.c_str(), 1);
  }
  std::map<std::string, std::string> saved_;
};

// `hpcnet ARGS` with the launcher variables cleared, then `vars` ("NAME=VALUE ...") set.
RunResult run_launched(const std::string& vars, const std::string& args) {
  std::string cmd = "env";
  for (const char* n : kLaunchVars) cmd += std::string(" -u ") + n;
  return run_shell(cmd + " " + vars + " " + hpcnet_command() + " " + args);
}

}  // namespace

TEST_F(LaunchEnvTest, ReadsTorchrunAndSlurmVariables) {
  EXPECT_EQ(dist::launcher_env().size, 0);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  dist::LauncherEnv e = dist::launcher_env();
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.launcher, "torchrun");
  for (const char* n : {"WORLD_SIZE", "RANK", "LOCAL_RANK"}) ::unsetenv(n);

  ::setenv("SLURM_NTASKS", "8", 1);  // an allocation, but no task of it: not a launch
  EXPECT_EQ(dist::launcher_env().size, 0);
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_LOCALID", "2", 1);
  e = dist::launcher_env();
  EXPECT_EQ(e.size, 8);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.variable, "SLURM_NTASKS");
  EXPECT_EQ(e.launcher, "Slurm, outside srun");
  ::setenv("SLURM_STEP_ID", "0", 1);
  EXPECT_EQ(dist::launcher_env().launcher, "srun");

  // mpirun inside the Slurm allocation: mpirun's own count wins (one process here).
  ::setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  e = dist::launcher_env();
  EXPECT_EQ(e.size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(dist::launcher_mismatch(1), "");
}

TEST_F(LaunchEnvTest, MismatchOnlyWhenTheLauncherSaysMoreThanTheGroupHas) {
  EXPECT_EQ(dist::launcher_mismatch(1), "");
  ::setenv("WORLD_SIZE", "1", 1);
  EXPECT_EQ(dist::launcher_mismatch(1), "");
  ::setenv("WORLD_SIZE", "2", 1);
  const std::string m = dist::launcher_mismatch(1);
  EXPECT_NE(m.find("WORLD_SIZE=2 (torchrun)"), std::string::npos) << m;
  EXPECT_NE(m.find("mpirun -np 2"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(dist::launcher_mismatch(2), "");  // an MPI world of the same size
  ::setenv("HPCNET_DIST", "single", 1);       // one process on purpose
  EXPECT_EQ(dist::launcher_mismatch(1), "");
  ::unsetenv("HPCNET_DIST");
  ::setenv("WORLD_SIZE", "two", 1);  // not a number: no claim
  EXPECT_EQ(dist::launcher_mismatch(1), "");
}

// The real binary, as torchrun or srun without MPI would start it.
class LaunchCliTest : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_cifar10(dir_ / "data", 8, 4, 91); }  // 40 training images
  std::string train_args(const std::string& out) const {
    return "train --data " + shell_quote((dir_ / "data").string()) + " --out " +
           shell_quote((dir_ / out).string()) +
           " --epochs 1 --batch-size 4 --workers 0 --threads 1 --no-progress --log-every 5";
  }
  TempDir tmp_{"launch"};
  fs::path dir_ = tmp_.path();
};

TEST_F(LaunchCliTest, TorchrunWorldOfTwoIsRefusedWithHowToLaunch) {
  RunResult r = run_launched("WORLD_SIZE=2 RANK=0 LOCAL_RANK=0", train_args("t2"));
  if (dist::mpi_built())
    expect_refused(r, "WORLD_SIZE=2",
                   {"WORLD_SIZE=2 (torchrun)", "sees 1 process", "mpirun -np 2 hpcnet train",
                    "srun --mpi=pmix -n 2"});
  else
    expect_refused(r, "WORLD_SIZE=2", {"WORLD_SIZE=2 (torchrun)", "-DHPCNET_MPI=ON"});
  EXPECT_FALSE(fs::exists(dir_ / "t2" / "model.safetensors"));
}

TEST_F(LaunchCliTest, SlurmTasksWithoutMpiAreRefusedWithHowToLaunch) {
  RunResult r = run_launched("SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_LOCALID=0", train_args("s2"));
  if (dist::mpi_built())
    expect_refused(r, "SLURM_NTASKS=2",
                   {"SLURM_NTASKS=2 (Slurm, outside srun)", "sees 1 process",
                    "srun --mpi=pmix -n 2 hpcnet train", "mpirun -np 2 hpcnet train"});
  else
    expect_refused(r, "SLURM_NTASKS=2",
                   {"SLURM_NTASKS=2 (Slurm, outside srun)", "-DHPCNET_MPI=ON"});
  EXPECT_FALSE(fs::exists(dir_ / "s2" / "model.safetensors"));
}

TEST_F(LaunchCliTest, OneProcessOrHpcnetDistSingleTrainsAsUsual) {
  const std::vector<std::string> launches = {"WORLD_SIZE=1 RANK=0 LOCAL_RANK=0",
                                             "SLURM_NTASKS=1 SLURM_PROCID=0",
                                             "WORLD_SIZE=2 HPCNET_DIST=single"};
  for (size_t i = 0; i < launches.size(); ++i) {
    const std::string& vars = launches[i];
    const std::string out = "ok" + std::to_string(i);
    RunResult r = run_launched(vars, train_args(out));
    EXPECT_EQ(r.rc, 0) << vars << "\n" << r.err;
    EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << vars << "\n" << r.out;
    EXPECT_TRUE(fs::exists(dir_ / out / "model.safetensors")) << vars;
  }
}
