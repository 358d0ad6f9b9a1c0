// HPCNET_MPI(call): the checked form of every MPI call (MPI build only). MPI is set to return error
// codes (MPI_ERRORS_RETURN) rather than abort, so a failure becomes a DistError naming the call,
// file:line, the MPI error text and this process's rank.
#pragma once

#ifndef HPCNET_WITH_MPI
#error "src/dist/mpi_check.h belongs to the MPI build (HPCNET_WITH_MPI)"
#endif

#define OMPI_SKIP_MPICXX 1  // the C API only (no deprecated C++ bindings)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

namespace hpcnet::dist::detail {
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
}  // namespace hpcnet::dist::detail

#define HPCNET_MPI(...)                                                                          \
  do {                                                                                           \
    int hpcnet_mpi_rc_ = (__VA_ARGS__);                                                          \
    if (hpcnet_mpi_rc_ != MPI_SUCCESS)                                                           \
      ::hpcnet::dist::detail::throw_mpi_error(hpcnet_mpi_rc_, #__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)
