// Tests of the layering (docs/architecture.md: each layer includes only those below it): no file
// under src/ or include/hpcnet/ may #include "..." a header of a higher layer, of another layer at
// its height, or of no known layer (a new folder or public header goes into the table below
// first), and no function may be defined in a layer above the header that declares it.
//
// The layers, lowest first:
//   0 core      src/core, hpcnet/{tensor,error,rng,profile}.h
//   1 kernels   the backend kernel API below autograd (tensors in, tensors out, no tape; the
//               engine accumulates gradients with it): its declarations src/ops/{ops.h,
//               kernels.inc}, the op names src/ops/op_table.h, the dispatch src/ops/{dispatch.h,
//               dispatch.cpp, float_dispatch.h}, the backends' shared helpers src/ops/backend/,
//               and in each op family's folder src/ops/<family>/ every file but functional.*
//               and record.cpp (kernels.cpp, the family's kernel API; cpu*.cpp, cuda*.cu, math.h)
//     io        src/io, hpcnet/io.h: safetensors and metrics files of tensors; it includes core
//               only, so it sits just above core (beside kernels, which it must not use)
//   2 autograd  src/autograd, hpcnet/autograd.h
//   3 ops       the differentiable ops: src/ops/<family>/functional.* (autograd nodes and F::)
//               and record.cpp (the op records), src/ops/{op_record.h, onnx_graph.h, trace.h,
//               omp_wait.*}, hpcnet/functional.h
//     dist      src/dist, hpcnet/dist.h: it includes core and autograd (the reducer hooks the
//               backward pass) and nothing of ops, so it sits beside ops
//   4 nn        src/nn, hpcnet/nn.h
//   5 optim     src/optim, hpcnet/optim.h
//     data      src/data, hpcnet/{data,shards}.h (includes core, and io for atomic writes;
//               docs/architecture.md draws it beside optim)
//   6 task      src/task, hpcnet/task.h
//     export    src/export, hpcnet/export.h: model export (ONNX); it includes nn, ops' trace and
//               io, nothing of task, so it sits beside task
//   7 train     src/train, hpcnet/train.h
//   8 cli       src/cli
//   9 tests     the ops' test cases, compiled into the test binary only: src/ops/op_cases.h and
//               src/ops/<family>/test_cases.cpp (they may include any layer)
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

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
      {"core", 0},   {"kernels", 1}, {"io", 1},    {"autograd", 2}, {"ops", 3},
      {"dist", 3},   {"nn", 4},      {"optim", 5}, {"data", 5},     {"task", 6},
      {"export", 6}, {"train", 7},   {"cli", 8},   {"tests", 9}};
  static const std::vector<std::string> kernel_files = {
      "src/ops/ops.h",        "src/ops/kernels.inc",      "src/ops/dispatch.h",
      "src/ops/dispatch.cpp", "src/ops/float_dispatch.h", "src/ops/op_table.h"};
  static const std::map<std::string, std::string> public_headers = {
      {"tensor.h", "core"},    {"error.h", "core"},        {"rng.h", "core"},
      {"profile.h", "core"},   {"autograd.h", "autograd"}, {"io.h", "io"},
      {"functional.h", "ops"}, {"dist.h", "dist"},         {"nn.h", "nn"},
      {"optim.h", "optim"},    {"data.h", "data"},         {"task.h", "task"},
      {"train.h", "train"},    {"export.h", "export"},     {"shards.h", "data"},
      {"video.h", "data"}};
  std::string p = path;
  if (p.rfind("include/", 0) == 0) p = p.substr(8);
  if (p.rfind("hpcnet/", 0) == 0) {
    auto it = public_headers.find(p.substr(7));
    if (it == public_headers.end()) return std::nullopt;
    return LyLayer{it->second, ranks.at(it->second)};
  }
  // The ops' test cases: above every layer of the library.
  if (p == "src/ops/op_cases.h" || (p.rfind("src/ops/", 0) == 0 && p.size() > 15 &&
                                    p.compare(p.size() - 15, 15, "/test_cases.cpp") == 0))
    return LyLayer{"tests", ranks.at("tests")};
  // src/ops/backend/... and src/ops/<family>/<file> but functional.* and record.cpp: kernels.
  const bool in_ops_folder = p.rfind("src/ops/", 0) == 0 && p.find('/', 8) != std::string::npos;
  const bool functional =
      p.find("/functional.") != std::string::npos || p.find("/record.cpp") != std::string::npos;
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

// ---- definitions: a function is defined in the layer of the header that declares it ----
//
// The include check cannot see a function declared in a low layer's header but defined in a file
// of a higher layer (the kernel API declared in src/ops/kernels.inc and defined beside the
// autograd nodes: autograd then depends on ops at link time). This check reads the namespace-
// scope functions (at column 0, as clang-format writes them) of every header with the namespaces
// around them (a .inc file takes those of the line that includes it), and of every .cpp and .cu
// file the functions it defines, and reports a definition whose layer is above, or beside, every
// layer that declares it. Qualified definitions (F::relu, Module::forward) resolve against the
// namespaces open where they stand.

struct LyFunctionHead {
  std::string name;  // qualified as written, e.g. "F::relu" or "add"
  bool definition;   // '{' before ';'
};

// The function whose head starts at column 0 of lines[i], if any: the statement up to its first
// ';' or '{' outside parentheses.
std::optional<LyFunctionHead> ly_function_head(const std::vector<std::string>& lines, size_t i) {
  static const std::regex head_re(
      R"(^(?:\[\[\w+\]\]\s*)?(?:(?:inline|static|constexpr|extern|virtual|explicit|friend)\s+)*)"
      R"([A-Za-z_][\w:<>,]*(?:\s*[*&]+\s*|\s+)((?:\w+::)*~?\w+)\s*\()");
  static const std::regex skip_re(
      R"(^(namespace|using|typedef|return|struct|class|enum|union|template|static_assert|#|//))");
  const std::string& first = lines[i];
  if (first.empty() || std::isspace(static_cast<unsigned char>(first[0])) ||
      std::regex_search(first, skip_re))
    return std::nullopt;
  std::smatch m;
  if (!std::regex_search(first, m, head_re)) return std::nullopt;
  int depth = 0;
  for (size_t k = i; k < lines.size() && k < i + 40; ++k) {
    const std::string& l = lines[k];
    for (size_t c = k == i ? static_cast<size_t>(m.position(0) + m.length(0) - 1) : 0; c < l.size();
         ++c) {
      if (l[c] == '/' && c + 1 < l.size() && l[c + 1] == '/') break;  // a comment
      if (l[c] == '(') ++depth;
      if (l[c] == ')') --depth;
      if (depth == 0 && (l[c] == ';' || l[c] == '{' || l[c] == '=')) {
        if (l[c] == '=') return std::nullopt;  // a variable
        return LyFunctionHead{m[1], l[c] == '{'};
      }
    }
  }
  return std::nullopt;
}

// The namespace opened or closed by a line: +name ("(anon)" for an anonymous one), "-", or "".
std::string ly_namespace_step(const std::string& line) {
  static const std::regex open_re(R"(^(?:inline\s+)?namespace\s*([\w:]*)\s*\{\s*(//.*)?$)");
  std::smatch m;
  if (std::regex_search(line, m, open_re)) return "+" + (m[1].length() ? m[1].str() : "(anon)");
  if (line.rfind("}  // namespace", 0) == 0) return "-";
  return "";
}

std::string ly_qualify(const std::vector<std::string>& ns, const std::string& name) {
  std::string q;
  for (const std::string& n : ns) q += n + "::";
  return q + name;
}

std::vector<std::string> ly_read_lines(const fs::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

using LyDeclarations = std::map<std::string, std::vector<LyLayer>>;  // qualified name -> layers

// Declarations of one header (or .inc, under the namespaces `outer`) into decls.
void ly_read_declarations(const fs::path& root, const std::string& rel, std::vector<std::string> ns,
                          LyDeclarations& decls) {
  const std::optional<LyLayer> layer = ly_layer(rel);
  if (!layer) return;
  static const std::regex inc_re(R"re(^\s*#\s*include\s*"([^"]+\.inc)")re");
  const std::vector<std::string> lines = ly_read_lines(root / rel);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string step = ly_namespace_step(lines[i]);
    if (step == "-" && !ns.empty()) ns.pop_back();
    if (step.size() > 1) {
      std::stringstream parts(step.substr(1));
      for (std::string p; std::getline(parts, p, ':');)
        if (!p.empty()) ns.push_back(p);
    }
    std::smatch m;
    if (std::regex_search(lines[i], m, inc_re) && fs::exists(root / m[1].str())) {
      ly_read_declarations(root, m[1], ns, decls);
      continue;
    }
    const std::optional<LyFunctionHead> h = ly_function_head(lines, i);
    if (h && !h->definition) decls[ly_qualify(ns, h->name)].push_back(*layer);
  }
}

// Every definition in a .cpp or .cu file under root/src of a function that a header declares
// only in lower layers (or beside its own): "FILE:LINE: defines NAME (layer a; declared in b)".
std::vector<std::string> ly_definition_violations(const fs::path& root,
                                                  int* defs_checked = nullptr) {
  LyDeclarations decls;
  std::vector<fs::path> sources;
  for (const char* top : {"src", "include/hpcnet"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      const std::string rel = fs::relative(e.path(), root).generic_string();
      if (ext == ".h" || ext == ".cuh") ly_read_declarations(root, rel, {}, decls);
      if (ext == ".cpp" || ext == ".cu") sources.push_back(e.path());
    }
  }
  std::vector<std::string> out;
  int checked = 0;
  for (const fs::path& p : sources) {
    const std::string rel = fs::relative(p, root).generic_string();
    const std::optional<LyLayer> self = ly_layer(rel);
    if (!self) continue;  // reported by the include check
    const std::vector<std::string> lines = ly_read_lines(p);
    std::vector<std::string> ns;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string step = ly_namespace_step(lines[i]);
      if (step == "-" && !ns.empty()) ns.pop_back();
      if (step.size() > 1) {
        std::stringstream parts(step.substr(1));
        for (std::string q; std::getline(parts, q, ':');)
          if (!q.empty()) ns.push_back(q);
      }
      const std::optional<LyFunctionHead> h = ly_function_head(lines, i);
      if (!h || !h->definition) continue;
      // The declaration it defines: the name qualified by the open namespaces, or by a prefix of
      // them (a qualified name written inside an outer namespace).
      const LyDeclarations::const_iterator* found = nullptr;
      LyDeclarations::const_iterator it;
      for (size_t k = ns.size() + 1; k-- > 0 && !found;) {
        it = decls.find(ly_qualify(std::vector<std::string>(ns.begin(), ns.begin() + k), h->name));
        if (it != decls.end()) found = &it;
      }
      if (!found) continue;
      ++checked;
      const std::vector<LyLayer>& where = (*found)->second;
      const bool fits = std::any_of(where.begin(), where.end(), [&](const LyLayer& d) {
        return d.name == self->name || d.rank > self->rank;
      });
      if (!fits)
        out.push_back(rel + ":" + std::to_string(i + 1) + ": defines " + (*found)->first +
                      " (layer " + self->name + "; declared in layer " + where.front().name + ")");
    }
  }
  if (defs_checked) *defs_checked = checked;
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

// Every function is defined in the layer of the header that declares it (the kernel API in the
// kernel layer, not beside the autograd nodes above it).
TEST(Layers, NoFunctionIsDefinedAboveItsDeclaration) {
  int checked = 0;
  const std::vector<std::string> v = ly_definition_violations(HPCNET_SOURCE_DIR, &checked);
  EXPECT_GT(checked, 200) << "the definitions were matched to their declarations";
  EXPECT_TRUE(v.empty()) << v.size() << " definition(s) above their declaration:\n" << ly_join(v);
}

// The definition check itself: the kernel API (declared in src/ops/kernels.inc, included inside
// namespace hpcnet::ops) defined in an op family's functional.cpp is reported, in its kernels.cpp
// it is not; an F:: function defined in the ops layer is fine, one defined in nn is reported.
TEST(Layers, TheDefinitionCheckFindsAKernelAboveItsDeclaration) {
  TempDir tmp("layers_defs");
  const fs::path r = tmp.path();
  fs::create_directories(r / "src/ops/elementwise");
  fs::create_directories(r / "src/nn");
  fs::create_directories(r / "include/hpcnet");
  write_file(r / "src/ops/kernels.inc",
             "// x -> y\nvoid relu_forward(const Tensor& x, Tensor& y);\n"
             "void add(const Tensor& a, const Tensor& b,\n         Tensor& out);\n");
  write_file(r / "src/ops/ops.h",
             "#pragma once\nnamespace hpcnet::ops {\n#include \"src/ops/kernels.inc\"\n"
             "}  // namespace hpcnet::ops\n");
  write_file(r / "include/hpcnet/functional.h",
             "namespace hpcnet {\nnamespace F {\nTensor relu(const Tensor& x);\n"
             "Tensor add(const Tensor& a, const Tensor& b);\n}  // namespace F\n"
             "}  // namespace hpcnet\n");
  write_file(r / "src/ops/elementwise/kernels.cpp",
             "namespace hpcnet::ops {\n\nvoid relu_forward(const Tensor& x, Tensor& y) {\n"
             "  HPCNET_DISPATCH(x.device(), relu_forward, x, y);\n}\n\n"
             "}  // namespace hpcnet::ops\n");  // fine
  write_file(r / "src/ops/elementwise/functional.cpp",
             "namespace hpcnet {\nnamespace ops {\n\nvoid add(const Tensor& a, const Tensor& b,\n"
             "         Tensor& out) {\n  HPCNET_DISPATCH(a.device(), add, a, b, out);\n}\n\n"
             "}  // namespace ops\n\nnamespace {\nvoid add(int a) {}\n}  // namespace\n\n"
             "Tensor F::relu(const Tensor& x) { return x; }\n\n}  // namespace hpcnet\n");
  write_file(
      r / "src/nn/layers.cpp",
      "namespace hpcnet {\nTensor F::add(const Tensor& a, const Tensor& b) {\n  return a;\n}\n"
      "}  // namespace hpcnet\n");
  int checked = 0;
  const std::vector<std::string> v = ly_definition_violations(r, &checked);
  EXPECT_EQ(checked, 4) << ly_join(v);
  const std::vector<std::string> want = {
      "src/ops/elementwise/functional.cpp:4: defines hpcnet::ops::add (layer ops; declared in "
      "layer kernels)",
      "src/nn/layers.cpp:2: defines hpcnet::F::add (layer nn; declared in layer ops)",
  };
  EXPECT_EQ(v, want) << ly_join(v);
}
