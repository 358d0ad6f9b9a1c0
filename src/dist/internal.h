// Internal to src/dist: what the MPI backend file provides to the rest (it compiles to stubs in a
// build without MPI), and what launchers say about the job.
#pragma once

#include <string>

namespace hpcnet::dist::detail {

// "Open MPI v4.1.4, ..." (first line of MPI_Get_library_version), or "" without MPI.
std::string mpi_library_version();

}  // namespace hpcnet::dist::detail

namespace hpcnet::dist {

// What the launcher that started this process says about the job, from its environment: the
// first of mpirun's (OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK), PMI's (PMI_SIZE, PMI_RANK,
// MPI_LOCALRANKID), torchrun's (WORLD_SIZE, RANK, LOCAL_RANK) and Slurm's (SLURM_NTASKS,
// SLURM_PROCID, SLURM_LOCALID; only with SLURM_PROCID, which a task of the job has) that is set.
struct LauncherEnv {
  int size = 0;                    // 0: no launcher variables
  int rank = -1, local_rank = -1;  // -1: not given
  std::string variable;            // "WORLD_SIZE"
  std::string launcher;            // "torchrun"
};
LauncherEnv launcher_env();

// "" when a process group of world_size processes is what the launcher asked for; else the one
// line hpcnet refuses to train with: the launcher says more than one process but the group has
// one (torchrun, srun without --mpi=pmix, or an mpirun of another MPI library), and how to launch
// it instead. HPCNET_DIST=single turns the check off.
std::string launcher_mismatch(int world_size);

}  // namespace hpcnet::dist
