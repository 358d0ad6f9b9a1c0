// The backend-neutral half of the process groups: the single-process group (the stub every build
// has), tensor forms of the collectives, launcher detection and the process-wide world() group.
// Invariant: world() is created once, on the first call, and lives until finalize() or exit.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "hpcnet/dist.h"
#include "src/dist/internal.h"

namespace hpcnet::dist {

namespace {

class DoneWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class SingleGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  std::unique_ptr<Work> allreduce_sum_async(float*, size_t) override {
    return std::make_unique<DoneWork>();
  }
  void broadcast(void*, size_t, int root) override {
    HPCNET_CHECK(root == 0, "broadcast from rank " + std::to_string(root) + " in a group of one");
  }
  void barrier() override {}
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::fflush(stdout);
    if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
};

void check_float(const Tensor& t, const char* what) {
  HPCNET_CHECK(t.defined(), std::string(what) + " of an undefined tensor");
  HPCNET_CHECK(t.is_contiguous(), std::string(what) + " of a non-contiguous tensor");
}

// check_float, and a float32 or float64 tensor (what a sum can reduce).
void check_summable(const Tensor& t, const char* what) {
  check_float(t, what);
  HPCNET_CHECK(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64,
               std::string(what) + " of a " + dtype_name(t.dtype()) + " tensor");
}

// Runs f on t's floats on the host: t itself on the CPU; for a CUDA tensor a host copy, written
// back after (the host-staged path: MPI moves host memory).
template <class Fn>
void on_host(Tensor& t, Fn&& f) {
  if (t.device().is_cpu()) return f(t);
  Tensor h = t.to(cpu_device());
  f(h);
  t.copy_(h);
}

std::mutex g_world_mu;
std::unique_ptr<ProcessGroup> g_world;

}  // namespace

std::unique_ptr<ProcessGroup> make_single_group() { return std::make_unique<SingleGroup>(); }

std::unique_ptr<Work> ProcessGroup::allreduce_device_async(float*, size_t, bool) {
  throw Error("the " + backend() + " process group has no device collectives");
}
void ProcessGroup::allreduce_device(void*, size_t, DType, bool) {
  throw Error("the " + backend() + " process group has no device collectives");
}
void ProcessGroup::broadcast_device(void*, size_t, int) {
  throw Error("the " + backend() + " process group has no device collectives");
}

void ProcessGroup::allreduce_sum(Tensor& t) {
  check_summable(t, "allreduce_sum");
  if (t.device().is_cuda() && reduces_on_device())
    return allreduce_device(t.raw_data(), static_cast<size_t>(t.numel()), t.dtype(), false);
  on_host(t, [&](Tensor& h) {
    if (h.dtype() == DType::kFloat32)
      allreduce_sum(h.data<float>(), static_cast<size_t>(h.numel()));
    else
      allreduce_sum(h.data<double>(), static_cast<size_t>(h.numel()));
  });
}

void ProcessGroup::allreduce_avg(Tensor& t) {
  if (t.device().is_cuda() && reduces_on_device()) {
    check_summable(t, "allreduce_avg");
    return allreduce_device(t.raw_data(), static_cast<size_t>(t.numel()), t.dtype(), true);
  }
  if (!t.device().is_cpu()) {
    check_float(t, "allreduce_avg");
    return on_host(t, [&](Tensor& h) { allreduce_avg(h); });
  }
  allreduce_sum(t);
  if (world_size() == 1) return;
  const int64_t n = t.numel();
  if (t.dtype() == DType::kFloat32) {
    const float s = 1.0f / static_cast<float>(world_size());
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
  } else {
    const double s = 1.0 / world_size();
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
  }
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  check_float(t, "broadcast");
  if (t.device().is_cuda() && reduces_on_device())
    return broadcast_device(t.raw_data(), t.nbytes(), root);
  on_host(t, [&](Tensor& h) { broadcast(h.raw_data(), h.nbytes(), root); });
}

bool launched_by_mpi_launcher() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (const char* force = std::getenv("HPCNET_DIST")) {
    if (std::strcmp(force, "single") == 0) return false;
    if (std::strcmp(force, "mpi") == 0) return true;
  }
  return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK") ||
         (env("SLURM_NTASKS") && env("SLURM_STEP_ID"));
}

namespace {

int env_int(const char* name) {  // -1 when unset, empty or not a number
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 && n <= 1 << 30 ? static_cast<int>(n) : -1;
}

}  // namespace

LauncherEnv launcher_env() {
  LauncherEnv e;
  struct Source {
    const char *size, *rank, *local_rank, *launcher;
  };
  // Most specific first: mpirun inside a Slurm allocation, or torchrun under srun, said last.
  const Source sources[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
      {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "an MPI launcher (PMI)"},
      {"WORLD_SIZE", "RANK", "LOCAL_RANK", "torchrun"},
      {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "Slurm"},
  };
  for (const Source& s : sources) {
    const int n = env_int(s.size);
    if (n < 1) continue;
    // SLURM_NTASKS alone is any job's allocation; a task of it also has SLURM_PROCID.
    if (std::strcmp(s.size, "SLURM_NTASKS") == 0 && env_int(s.rank) < 0) continue;
    e.size = n;
    e.rank = env_int(s.rank);
    e.local_rank = env_int(s.local_rank);
    e.variable = s.size;
    e.launcher = s.launcher;
    if (e.launcher == "Slurm")
      e.launcher = std::getenv("SLURM_STEP_ID") ? "srun" : "Slurm, outside srun";
    break;
  }
  return e;
}

std::string launcher_mismatch(int world_size) {
  if (const char* force = std::getenv("HPCNET_DIST"))
    if (std::strcmp(force, "single") == 0) return "";
  const LauncherEnv e = launcher_env();
  if (e.size <= 1 || world_size != 1) return "";
  const std::string n = std::to_string(e.size);
  std::string line = e.variable + "=" + n + " (" + e.launcher + ") but ";
  if (!mpi_built())
    line +=
        "this build of hpcnet has no MPI and runs 1 process: rebuild with -DHPCNET_MPI=ON "
        "(libopenmpi-dev), then launch with mpirun -np " +
        n + " hpcnet train ...";
  else if (e.variable == "OMPI_COMM_WORLD_SIZE" || e.variable == "PMI_SIZE")
    line +=
        "hpcnet's MPI sees 1 process: hpcnet is linked against another MPI library than "
        "this launcher's (see hpcnet info); launch with that library's mpirun -np " +
        n;
  else if (e.variable == "SLURM_NTASKS")
    line += "hpcnet's process group is MPI and sees 1 process: launch with srun --mpi=pmix -n " +
            n + " hpcnet train ... or mpirun -np " + n + " hpcnet train ...";
  else
    line += "hpcnet's process group is MPI and sees 1 process: launch with mpirun -np " + n +
            " hpcnet train ... or srun --mpi=pmix -n " + n + " hpcnet train ...";
  return line + " (HPCNET_DIST=single runs this one process alone)";
}

ProcessGroup& world() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  if (!g_world) {
    std::unique_ptr<ProcessGroup> g =
        mpi_built() && launched_by_mpi_launcher() ? make_mpi_group() : make_single_group();
    // N copies that each see a world of one would each train alone on the same files. On a
    // throw, g's destructor leaves MPI (MPI_Finalize) before the CLI exits 2.
    const std::string mismatch = launcher_mismatch(g->world_size());
    if (!mismatch.empty()) throw InputError(mismatch);
    g_world = std::move(g);
  }
  return *g_world;
}

bool world_initialized() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  return g_world != nullptr;
}

void finalize() {
  std::lock_guard<std::mutex> lock(g_world_mu);
  g_world.reset();  // the MPI group's destructor calls MPI_Finalize when it called MPI_Init
}

std::string describe_build() {
  if (!mpi_built()) return "single process (this build has no MPI, which NCCL's ranks also need)";
  std::string s = "MPI (" + detail::mpi_library_version() + "), used when started by mpirun/srun";
  const std::string why = nccl_unusable_reason();
  if (why.empty())
    return s + "; NCCL " + nccl_version() +
           " for CUDA tensors (one GPU per rank; else host copies)";
  return s + "; CUDA tensors reduced through host copies (NCCL: " + why + ")";
}

std::string nccl_unusable_on_this_rank(bool on_cuda, int ranks_on_its_gpu) {
  if (!on_cuda) return "a rank runs on the CPU";  // (no dlopen of NCCL on CPU ranks)
  if (ranks_on_its_gpu > 1)
    return std::to_string(ranks_on_its_gpu) +
           " ranks share one GPU, and NCCL needs a GPU of its own for each rank";
  return nccl_unusable_reason();
}

std::vector<uint64_t> allgather_u64(ProcessGroup& group, uint64_t value) {
  const size_t n = static_cast<size_t>(group.world_size());
  std::vector<double> halves(2 * n, 0.0);  // 32-bit halves: exact in a double, and in their sum
  const size_t r = static_cast<size_t>(group.rank());
  halves[2 * r] = static_cast<double>(value >> 32);
  halves[2 * r + 1] = static_cast<double>(value & 0xffffffffu);
  group.allreduce_sum(halves.data(), halves.size());
  std::vector<uint64_t> out(n);
  for (size_t k = 0; k < n; ++k)
    out[k] = (static_cast<uint64_t>(halves[2 * k]) << 32) |
             static_cast<uint64_t>(halves[2 * k + 1]);
  return out;
}

std::string choose_cuda_backend(const std::string& requested, int world_size, int ranks_able,
                                const std::string& usable_here) {
  if (requested == "mpi") return "mpi";
  HPCNET_CHECK(requested == "auto" || requested == "nccl",
               "--dist-backend must be auto, nccl or mpi, not " + requested);
  if (ranks_able >= world_size) return "nccl";
  if (requested == "auto") return "mpi";
  std::string line = "--dist-backend nccl: ";
  if (!usable_here.empty())
    line += usable_here;
  else
    line += std::to_string(world_size - ranks_able) + " of " + std::to_string(world_size) +
            " ranks cannot use NCCL (see their messages)";
  throw InputError(line +
                   "; use --dist-backend mpi (gradients through host copies), or start at most "
                   "one rank per GPU");
}

uint64_t fingerprint(const std::vector<Tensor>& tensors) {
  uint64_t h = 1469598103934665603ULL;
  for (const Tensor& t0 : tensors) {
    Tensor t = t0.to(cpu_device()).contiguous();
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0, n = t.nbytes(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
  return h;
}

void check_same_on_all_ranks(ProcessGroup& group, const std::vector<Tensor>& tensors,
                             const std::string& what) {
  if (group.world_size() == 1) return;
  const uint64_t mine = fingerprint(tensors);
  uint64_t root = mine;
  group.broadcast(&root, sizeof root, 0);
  double differ[1] = {root != mine ? 1.0 : 0.0};
  group.allreduce_sum(differ, 1);
  if (differ[0] != 0)
    throw DistError(what + " differ between ranks (" + std::to_string(static_cast<int>(differ[0])) +
                    " of " + std::to_string(group.world_size()) +
                    " ranks disagree with rank 0); the replicas are out of step");
}

}  // namespace hpcnet::dist
