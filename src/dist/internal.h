// Internal to src/dist: what the MPI backend file provides to the rest (it compiles to stubs in a
// build without MPI).
#pragma once

#include <string>

namespace hpcnet::dist::detail {

// "Open MPI v4.1.4, ..." (first line of MPI_Get_library_version), or "" without MPI.
std::string mpi_library_version();

}  // namespace hpcnet::dist::detail
