// `hpcnet --version` and `hpcnet info`: the version with the build's git revision (the
// checkout's own when built from one), the build type and flags, the CPU's model and extension
// lines agreeing with /proc/cpuinfo, and library versions agreeing with the libraries' own calls;
// the OpenMP wait policy the binary runs with.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

// clang-format off
#include <cstdio>
#include <jpeglib.h>  // after <cstdio>: it needs FILE
#include <png.h>
#include <archive.h>
#include <curl/curl.h>
// clang-format on

#include "src/ops/omp_wait.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

RunResult run_cli(const std::vector<std::string>& args) {
  return run_hpcnet(args, fs::temp_directory_path());
}

// The line of `text` that starts with `prefix` ("" when none does).
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const std::string& l : split_lines(text))
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

}  // namespace

TEST(CliVersion, NamesTheVersionAndTheGitRevision) {
  RunResult r = run_cli({"--version"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  const std::string line = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(hpcnet (\d+\.\d+\.\d+) \(revision (\S+)\))")))
      << r.out;
  const std::string rev = m[2];
  // Built from a git checkout (this one, when git is here): its describe, never "unknown".
  RunResult git = run_shell("git -C " + shell_quote(HPCNET_SOURCE_DIR) + " rev-parse --short HEAD");
  if (git.rc == 0 && fs::exists(fs::path(HPCNET_SOURCE_DIR) / ".git")) {
    EXPECT_TRUE(std::regex_match(rev, std::regex(R"(([\w.\-]+-g)?[0-9a-f]{7,}(-dirty)?)"))) << rev;
  } else {
    EXPECT_EQ(rev, "unknown");
  }
  // info's first line is the same.
  RunResult info = run_cli({"info"});
  ASSERT_EQ(info.rc, 0) << info.err;
  EXPECT_EQ(info.out.substr(0, info.out.find('\n')), line);
}

TEST(CliInfo, ListsTheBuildAndTheCpuExtensionsAsProcCpuinfoSaysThem) {
  RunResult r = run_cli({"info"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\nbuild: (Release|Debug|RelWithDebInfo|MinSizeRel|\S*), \S+ \S+\n)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  CMAKE_CXX_FLAGS_\w* +\S.*\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  -march=native +(on|off))"))) << r.out;

  std::set<std::string> flags;
  std::string model;
  std::ifstream f("/proc/cpuinfo");
  for (std::string l; std::getline(f, l);) {
    if (model.empty() && l.rfind("model name", 0) == 0) model = l.substr(l.find(':') + 2);
    if (flags.empty() && l.rfind("flags", 0) == 0) {
      std::istringstream words(l.substr(l.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  const std::string cpu = line_starting(r.out, "cpu: ");
  ASSERT_NE(cpu, "") << r.out;
  if (!model.empty()) EXPECT_EQ(cpu.rfind("cpu: " + model + ", ", 0), 0u) << cpu;
  const std::pair<const char*, const char*> extensions[] = {{"AVX2", "avx2"},
                                                            {"AVX-512F", "avx512f"},
                                                            {"AVX512-BF16", "avx512_bf16"},
                                                            {"AMX-BF16", "amx_bf16"},
                                                            {"AMX-TILE", "amx_tile"}};
  for (auto [name, flag] : extensions) {
    const std::string l = line_starting(r.out, std::string("  ") + name + " ");
    ASSERT_TRUE(std::regex_match(l, std::regex(std::string("  ") + name + " +(yes|no)")))
        << name << " in\n"
        << r.out;
    if (!flags.empty()) EXPECT_EQ(l.substr(l.size() - 3) == "yes", flags.count(flag) == 1) << l;
  }
}

TEST(CliInfo, LibraryVersionsAreTheLoadedLibrariesOwn) {
  RunResult r = run_cli({"info"});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_NE(r.out.find("\nlibraries:\n"), std::string::npos) << r.out;
  auto version_of = [&](const std::string& lib) {
    std::string l = line_starting(r.out, "  " + lib + " ");
    size_t b = l.find_first_not_of(' ', lib.size() + 2);
    return b == std::string::npos ? std::string() : l.substr(b);
  };
#ifdef LIBJPEG_TURBO_VERSION
#define TEST_INFO_STR_(x) #x
#define TEST_INFO_STR(x) TEST_INFO_STR_(x)
  EXPECT_EQ(version_of("libjpeg-turbo").rfind(TEST_INFO_STR(LIBJPEG_TURBO_VERSION) " ", 0), 0u)
      << r.out;
#else
  EXPECT_NE(version_of("libjpeg"), "") << r.out;
#endif
  EXPECT_EQ(version_of("libpng"), png_get_header_ver(nullptr)) << r.out;
  EXPECT_EQ("libarchive " + version_of("libarchive"), archive_version_string()) << r.out;
  EXPECT_EQ(version_of("libcurl").rfind(curl_version_info(CURLVERSION_NOW)->version, 0), 0u)
      << r.out;
}

// ---- the OpenMP wait policy --------------------------------------------------------------------

// When the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: passive waiting on a machine
// whose other processes keep at least kBusyCores busy, GOMP_SPINCOUNT=kOmpSpinCount otherwise;
// nothing when they set either.
TEST(OmpWaitDefault, OnlyWhereTheUserChoseNothing) {
  using Env = std::map<std::string, std::string>;
  auto defaults = [](const Env& env, double busy) {
    return ops::omp_wait_defaults(
        [&](const char* name) -> const char* {
          auto it = env.find(name);
          return it == env.end() ? nullptr : it->second.c_str();
        },
        busy);
  };
  using V = std::vector<std::pair<std::string, std::string>>;
  const V spin{{"GOMP_SPINCOUNT", ops::kOmpSpinCount}}, passive{{"OMP_WAIT_POLICY", "passive"}};
  EXPECT_EQ(defaults({}, 0.0), spin);  // an idle machine: the bounded spin
  EXPECT_EQ(defaults({}, 0.3), spin);
  EXPECT_EQ(defaults({}, -1), spin);  // unknown: the spin
  EXPECT_EQ(defaults({}, ops::kBusyCores), passive);  // others keep a core busy: passive
  EXPECT_EQ(defaults({}, 1.9), passive);
  EXPECT_EQ(defaults({{"OMP_NUM_THREADS", "2"}}, 0.0), spin);
  for (double busy : {0.0, 2.0}) {
    EXPECT_TRUE(defaults({{"OMP_WAIT_POLICY", "passive"}}, busy).empty());
    EXPECT_TRUE(defaults({{"OMP_WAIT_POLICY", "active"}}, busy).empty());
    EXPECT_TRUE(defaults({{"GOMP_SPINCOUNT", "300000"}}, busy).empty());
    EXPECT_TRUE(defaults({{"GOMP_SPINCOUNT", ""}}, busy).empty());  // set, even if empty
  }
  // The machine's busy cores: a figure between 0 and the number of cores.
  const double b = ops::busy_cores(20);
  EXPECT_GE(b, 0.0);
  EXPECT_LE(b, static_cast<double>(std::thread::hardware_concurrency()) + 0.01);
}

// What the binary's OpenMP runtime really uses, as libgomp shows it (OMP_DISPLAY_ENV=VERBOSE,
// printed when the library loads; libgomp reads the variables only then, so the default needs the
// binary to execute itself again, and the last display is the one in force): the bounded spin by
// default, the user's GOMP_SPINCOUNT or OMP_WAIT_POLICY untouched (and no second start). The
// command's own output is printed once.
TEST(OmpWaitDefault, TheBinaryRunsWithItUnlessTheUserChose) {
  auto run = [](const std::string& env) {
    return run_shell("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=VERBOSE " + env +
                     " " + hpcnet_command() + " --version");
  };
  auto spin_lines = [](const std::string& err) {
    std::vector<std::string> out;
    for (const std::string& l : split_lines(err))
      if (l.find("GOMP_SPINCOUNT = ") != std::string::npos) out.push_back(l);
    return out;
  };
  RunResult r = run("");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(split_lines(r.out).size(), 1u) << r.out;
  std::vector<std::string> s = spin_lines(r.err);
  ASSERT_FALSE(s.empty()) << r.err;
  // The bounded spin, or passive waiting when the machine was busy as it started (ctest -j2).
  EXPECT_TRUE(s.back() == std::string("  GOMP_SPINCOUNT = '") + ops::kOmpSpinCount + "'" ||
              (s.back() == "  GOMP_SPINCOUNT = '0'" &&
               r.err.rfind("OMP_WAIT_POLICY = 'PASSIVE'") != std::string::npos))
      << r.err;

  r = run("GOMP_SPINCOUNT=123");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(spin_lines(r.err), std::vector<std::string>{"  GOMP_SPINCOUNT = '123'"}) << r.err;
  r = run("OMP_WAIT_POLICY=passive");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(spin_lines(r.err), std::vector<std::string>{"  GOMP_SPINCOUNT = '0'"}) << r.err;
  EXPECT_NE(r.err.find("OMP_WAIT_POLICY = 'PASSIVE'"), std::string::npos) << r.err;
  r = run("OMP_WAIT_POLICY=active");
  ASSERT_EQ(r.rc, 0) << r.err;
  s = spin_lines(r.err);
  ASSERT_EQ(s.size(), 1u) << r.err;
  EXPECT_NE(s[0], std::string("  GOMP_SPINCOUNT = '") + ops::kOmpSpinCount + "'");
  EXPECT_NE(r.err.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << r.err;
}
