// What `hpcnet --version` and `hpcnet info` say about this build and this machine. The build's
// settings come from files CMake generates (cmake/hpcnet_build_info.cmake): build_config.cpp on
// every configure, git_revision.cpp on every build (rewritten only when the revision changes).
#pragma once

#include <string>

namespace hpcnet::cli {

// How this binary was configured (CMake's values at configure time).
struct BuildConfig {
  const char* version;         // PROJECT_VERSION, "0.1.0"
  const char* build_type;      // CMAKE_BUILD_TYPE, "Release"
  const char* compiler;        // "GNU 12.2.0"
  const char* cxx_flags;       // CMAKE_CXX_FLAGS (often empty)
  const char* cxx_flags_var;   // "CMAKE_CXX_FLAGS_RELEASE"
  const char* cxx_flags_type;  // its value, "-O3 -DNDEBUG"
  bool native;                 // HPCNET_NATIVE: -march=native
  const char* cuda;            // "off", or "nvcc 13.0.88, archs 80-real;90-real;80-virtual"
  bool mpi;                    // HPCNET_MPI
};
const BuildConfig& build_config();

// `git describe --always` of the source tree at build time, with "-dirty" when tracked files
// differed from that commit; "unknown" when the source tree is not a git checkout.
const char* git_revision();

// "hpcnet 0.1.0 (revision 9326e1a-dirty)": the --version line, and the first line of info.
std::string version_line();

// The info sections "build:" (type, compiler, flags, -march=native) and "cpu:" (model, logical
// CPUs, and yes/no for AVX2, AVX-512F, AVX512-BF16, AMX-BF16, AMX-TILE as /proc/cpuinfo's flags
// report them, or cpuid where there is no such file), printed to stdout.
void print_build_and_cpu();
// The "libraries:" section: libjpeg-turbo (its headers' version: it has no version call), libpng,
// libarchive and libcurl (each as the loaded library reports itself), printed to stdout.
void print_library_versions();

}  // namespace hpcnet::cli
