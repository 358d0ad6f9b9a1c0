// Tests of the layering (DESIGN.md: each layer includes only those below it): no file under src/
// or include/hpcnet/ may #include "..." a header of a higher layer, of another layer at its
// height, or of no known layer (a new folder or public header goes into the table below first).
//
// The layers, lowest first:
//   0 core      src/core, hpcnet/{tensor,error,rng,profile}.h
//   1 kernels   the backend kernel API below autograd (tensors in, tensors out, no tape; the
//               engine accumulates gradients with it): its declarations src/ops/{ops.h,
//               kernels.inc}, the dispatch src/ops/{dispatch.h, dispatch.cpp, float_dispatch.h},
//               the backends' shared helpers src/ops/backend/, and in each op family's folder
//               src/ops/<family>/ every file but functional.cpp (kernels.cpp, the family's
//               kernel API; cpu*.cpp, cuda*.cu, math.h)
//     io        src/io, hpcnet/io.h: safetensors and metrics files of tensors; it includes core
//               only, so it sits just above core (beside kernels, which it must not use)
//   2 autograd  src/autograd, hpcnet/autograd.h
//   3 ops       the differentiable ops: src/ops/<family>/functional.cpp (autograd nodes and F::),
//               src/ops/{op_table.h, trace.h, omp_wait.*}, hpcnet/functional.h
//     dist      src/dist, hpcnet/dist.h: it includes core and autograd (the reducer hooks the
//               backward pass) and nothing of ops, so it sits beside ops
//   4 nn        src/nn, hpcnet/nn.h
//   5 optim     src/optim, hpcnet/optim.h
//     data      src/data, hpcnet/{data,shards}.h (includes core, and io for atomic writes;
//               DESIGN.md puts it beside optim)
//   6 task      src/task, hpcnet/task.h
//     export    src/export, hpcnet/export.h: model export (ONNX); it includes nn, ops' trace and
//               io, nothing of task, so it sits beside task
//   7 train     src/train, hpcnet/train.h
//   8 cli       src/cli
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

#ifndef HPCNET_SOURCE_DIR
#error "HPCNET_SOURCE_DIR (the source tree) must be defined by the build"
#endif

namespace fs = std::filesystem;
using hpcnet::test_util::TempDir;
using hpcnet::test_util::write_file;

namespace {

struct LyLayer {
  std::string name;
  int rank;
};

// The layer of a path relative to the source root ("src/ops/ops.h", "include/hpcnet/nn.h") or of
// an include target ("src/ops/ops.h", "hpcnet/nn.h"); nullopt when it belongs to none.
std::optional<LyLayer> ly_layer(const std::string& path) {
  static const std::map<std::string, int> ranks = {
      {"core", 0}, {"kernels", 1}, {"io", 1},   {"autograd", 2}, {"ops", 3},   {"dist", 3},
      {"nn", 4},   {"optim", 5},   {"data", 5}, {"task", 6},     {"export", 6}, {"train", 7}, {"cli", 8}};
  static const std::vector<std::string> kernel_files = {
      "src/ops/ops.h", "src/ops/kernels.inc", "src/ops/dispatch.h", "src/ops/dispatch.cpp",
      "src/ops/float_dispatch.h"};
  static const std::map<std::string, std::string> public_headers = {
      {"tensor.h", "core"}, {"error.h", "core"},     {"rng.h", "core"},
      {"profile.h", "core"}, {"autograd.h", "autograd"}, {"io.h", "io"},
      {"functional.h", "ops"}, {"dist.h", "dist"},   {"nn.h", "nn"},
      {"optim.h", "optim"},  {"data.h", "data"},     {"task.h", "task"},
      {"train.h", "train"}, {"export.h", "export"}, {"shards.h", "data"}};
  std::string p = path;
  if (p.rfind("include/", 0) == 0) p = p.substr(8);
  if (p.rfind("hpcnet/", 0) == 0) {
    auto it = public_headers.find(p.substr(7));
    if (it == public_headers.end()) return std::nullopt;
    return LyLayer{it->second, ranks.at(it->second)};
  }
  // src/ops/backend/... and src/ops/<family>/<file> other than functional.cpp: the kernel layer.
  const bool in_ops_folder = p.rfind("src/ops/", 0) == 0 && p.find('/', 8) != std::string::npos;
  const bool functional = p.size() > 15 && p.compare(p.size() - 15, 15, "/functional.cpp") == 0;
  if ((in_ops_folder && !functional) ||
      std::find(kernel_files.begin(), kernel_files.end(), p) != kernel_files.end())
    return LyLayer{"kernels", ranks.at("kernels")};
  if (p.rfind("src/", 0) == 0) {
    const size_t slash = p.find('/', 4);
    if (slash == std::string::npos) return std::nullopt;
    auto it = ranks.find(p.substr(4, slash - 4));
    if (it == ranks.end()) return std::nullopt;
    return LyLayer{it->first, it->second};
  }
  return std::nullopt;
}

// Every quoted #include of every source file under root/src and root/include/hpcnet that breaks
// the layering, one line each: "FILE:LINE: includes TARGET (layer a may not include layer b)".
std::vector<std::string> ly_violations(const fs::path& root, int* files_read = nullptr) {
  std::vector<std::string> out;
  int files = 0;
  const std::regex include_re(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const char* top : {"src", "include/hpcnet"}) {
    if (!fs::exists(root / top)) {
      out.push_back(std::string(top) + ": missing");
      continue;
    }
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".inc") continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      ++files;
      const std::optional<LyLayer> self = ly_layer(rel);
      if (!self) {
        out.push_back(rel + ": belongs to no layer (add it to tests/ops/test_layers.cpp)");
        continue;
      }
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        const std::string target = m[1];
        const std::optional<LyLayer> to = ly_layer(target);
        const std::string where = rel + ":" + std::to_string(n) + ": includes \"" + target + "\"";
        if (!to)
          out.push_back(where + ", which belongs to no layer");
        else if (to->name != self->name && to->rank >= self->rank)
          out.push_back(where + " (layer " + self->name + " may not include layer " + to->name +
                        ")");
      }
    }
  }
  if (files_read) *files_read = files;
  return out;
}

std::string ly_join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += "  " + l + "\n";
  return s;
}

}  // namespace

// The source tree keeps its layers.
TEST(Layers, NoFileIncludesAHigherLayer) {
  int files = 0;
  const std::vector<std::string> v = ly_violations(HPCNET_SOURCE_DIR, &files);
  EXPECT_GT(files, 50) << "the tree was read";
  EXPECT_TRUE(v.empty()) << v.size() << " layering violation(s):\n" << ly_join(v);
}

// The check itself: a tree with one file of each kind of mistake reports exactly those.
TEST(Layers, TheCheckFindsViolations) {
  TempDir tmp("layers");
  const fs::path r = tmp.path();
  fs::create_directories(r / "src/data");
  fs::create_directories(r / "src/nn");
  fs::create_directories(r / "src/io");
  fs::create_directories(r / "src/gizmo");
  fs::create_directories(r / "include/hpcnet");
  write_file(r / "include/hpcnet/data.h", "#include \"hpcnet/tensor.h\"\n");
  write_file(r / "include/hpcnet/nn.h", "#include \"hpcnet/functional.h\"\n");
  write_file(r / "src/nn/module.cpp",
             "#include <vector>\n#include \"hpcnet/nn.h\"\n#include \"src/ops/ops.h\"\n"
             "#include \"src/core/tensor.h\"\n");  // all fine
  write_file(r / "src/data/bad.cpp",
             "// a comment\n#include \"hpcnet/data.h\"\n  #  include \"hpcnet/train.h\"\n");
  write_file(r / "src/io/peer.cpp", "#include \"hpcnet/autograd.h\"\n");  // same height
  write_file(r / "src/nn/odd.h", "#include \"hpcnet/extra.h\"\n");
  write_file(r / "src/gizmo/g.cpp", "\n");
  int files = 0;
  const std::vector<std::string> v = ly_violations(r, &files);
  EXPECT_EQ(files, 7);
  const std::vector<std::string> want = {
      "src/data/bad.cpp:3: includes \"hpcnet/train.h\"",
      "src/io/peer.cpp:1: includes \"hpcnet/autograd.h\"",
      "src/nn/odd.h:1: includes \"hpcnet/extra.h\", which belongs to no layer",
      "src/gizmo/g.cpp: belongs to no layer",
  };
  ASSERT_EQ(v.size(), want.size()) << ly_join(v);
  for (const std::string& w : want) {
    bool found = false;
    for (const std::string& l : v) found = found || l.rfind(w, 0) == 0;
    EXPECT_TRUE(found) << w << " not in\n" << ly_join(v);
  }
}
