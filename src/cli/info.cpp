// The version line and the build, CPU and library sections of `hpcnet info` (see build_info.h).
// CPU extensions are read from /proc/cpuinfo's flags (what the kernel lets programs use), with
// cpuid as the fallback; library versions come from the libraries' own version calls at run time.
#include <fmt/core.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/build_info.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// clang-format off
#include <cstdio>
#include <jpeglib.h>  // after <cstdio>: it needs FILE
#include <png.h>
#include <archive.h>
#include <curl/curl.h>
// clang-format on

namespace hpcnet::cli {

namespace {

struct CpuExtension {
  const char* name;  // as Intel's manuals write it
  const char* flag;  // the /proc/cpuinfo flag
  // cpuid leaf 7: subleaf, register (0 eax, 1 ebx, 2 ecx, 3 edx) and bit
  unsigned subleaf, reg, bit;
};

constexpr CpuExtension kExtensions[] = {
    {"AVX2", "avx2", 0, 1, 5},
    {"AVX-512F", "avx512f", 0, 1, 16},
    {"AVX512-BF16", "avx512_bf16", 1, 0, 5},
    {"AMX-BF16", "amx_bf16", 0, 3, 22},
    {"AMX-TILE", "amx_tile", 0, 3, 24},
};

struct CpuInfo {
  std::string model = "unknown";
  unsigned logical = 0;
  std::set<std::string> flags;
  std::string source;  // where `flags` came from
};

std::string after_colon(const std::string& line) {
  size_t p = line.find(':');
  if (p == std::string::npos) return "";
  size_t b = line.find_first_not_of(" \t", p + 1);
  return b == std::string::npos ? "" : line.substr(b);
}

CpuInfo read_cpu_info() {
  CpuInfo c;
  std::ifstream f("/proc/cpuinfo");
  bool have_model = false, have_flags = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("processor", 0) == 0) ++c.logical;
    if (!have_model && line.rfind("model name", 0) == 0) {
      c.model = after_colon(line);
      have_model = true;
    }
    if (!have_flags && line.rfind("flags", 0) == 0) {
      std::istringstream words(after_colon(line));
      for (std::string w; words >> w;) c.flags.insert(w);
      have_flags = true;
      c.source = "/proc/cpuinfo flags";
    }
  }
  if (c.logical == 0) c.logical = std::thread::hardware_concurrency();
#if defined(__x86_64__) || defined(__i386__)
  if (!have_flags) {
    c.source = "cpuid";
    for (const CpuExtension& e : kExtensions) {
      unsigned r[4] = {0, 0, 0, 0};
      if (__get_cpuid_count(7, e.subleaf, &r[0], &r[1], &r[2], &r[3]) && (r[e.reg] >> e.bit & 1))
        c.flags.insert(e.flag);
    }
  }
  if (!have_model) {
    unsigned r[12] = {};
    if (__get_cpuid(0x80000002, &r[0], &r[1], &r[2], &r[3]) &&
        __get_cpuid(0x80000003, &r[4], &r[5], &r[6], &r[7]) &&
        __get_cpuid(0x80000004, &r[8], &r[9], &r[10], &r[11])) {
      std::string brand(reinterpret_cast<const char*>(r), sizeof r);
      brand = brand.c_str();  // up to its NUL
      size_t b = brand.find_first_not_of(' ');
      if (b != std::string::npos) c.model = brand.substr(b);
    }
  }
#endif
  if (c.source.empty()) c.source = "no /proc/cpuinfo flags and no cpuid on this architecture";
  return c;
}

#define HPCNET_STRINGIFY_(x) #x
#define HPCNET_STRINGIFY(x) HPCNET_STRINGIFY_(x)

}  // namespace

std::string version_line() {
  return fmt::format("hpcnet {} (revision {})", build_config().version, git_revision());
}

void print_build_and_cpu() {
  const BuildConfig& b = build_config();
  fmt::print("build: {}, {}\n", b.build_type, b.compiler);
  fmt::print("  {:<24} {}\n", b.cxx_flags_var, *b.cxx_flags_type ? b.cxx_flags_type : "(empty)");
  fmt::print("  {:<24} {}\n", "CMAKE_CXX_FLAGS", *b.cxx_flags ? b.cxx_flags : "(empty)");
  fmt::print("  {:<24} {}\n", "-march=native", b.native ? "on (HPCNET_NATIVE)" : "off");
  fmt::print("  {:<24} {}\n", "CUDA", b.cuda);
  fmt::print("  {:<24} {}\n", "MPI", b.mpi ? "on" : "off");
  const CpuInfo c = read_cpu_info();
  fmt::print("cpu: {}, {} logical CPUs; extensions ({}):\n", c.model, c.logical, c.source);
  for (const CpuExtension& e : kExtensions)
    fmt::print("  {:<12} {}\n", e.name, c.flags.count(e.flag) ? "yes" : "no");
}

void print_library_versions() {
  fmt::print("libraries:\n");
#ifdef LIBJPEG_TURBO_VERSION
  fmt::print("  {:<14} {} (its headers: libjpeg has no version call)\n", "libjpeg-turbo",
             HPCNET_STRINGIFY(LIBJPEG_TURBO_VERSION));
#else
  fmt::print("  {:<14} JPEG_LIB_VERSION {} (its headers)\n", "libjpeg", JPEG_LIB_VERSION);
#endif
  fmt::print("  {:<14} {}\n", "libpng", png_get_header_ver(nullptr));
  std::string archive = archive_version_string();  // "libarchive 3.6.2"
  if (archive.rfind("libarchive ", 0) == 0) archive = archive.substr(11);
  fmt::print("  {:<14} {}\n", "libarchive", archive);
  const curl_version_info_data* curl = curl_version_info(CURLVERSION_NOW);
  fmt::print("  {:<14} {}{}{}{}\n", "libcurl", curl->version, curl->ssl_version ? " (" : "",
             curl->ssl_version ? curl->ssl_version : "", curl->ssl_version ? ")" : "");
}

}  // namespace hpcnet::cli
