// The YOLO model descriptions: hpcnet's own copies of Ultralytics 8.4's cfg/models/v8/yolov8.yaml
// and cfg/models/11/yolo11.yaml as data, and the reader of a model YAML a user gives (the same
// format: nc, scales {name: [depth, width, max_channels]}, backbone and head rows
// [from, repeats, module, args]). Python's literals in args: integers, reals, True/False, None
// (also null, ~); other plain words stay names ("nc" is resolved when the model is built).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "src/nn/models/yolo.h"

namespace hpcnet::nn {

std::string YoloArg::str() const {
  switch (kind) {
    case Kind::kInt:
      return std::to_string(static_cast<int64_t>(value));
    case Kind::kReal: {
      std::ostringstream o;
      o << value;
      std::string s = o.str();
      return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
    }
    case Kind::kBool:
      return value != 0 ? "True" : "False";
    case Kind::kNone:
      return "None";
    case Kind::kName:
      break;
  }
  return name;
}

std::string YoloRow::str() const {
  std::string f;
  if (from.size() == 1) {
    f = std::to_string(from[0]);
  } else {
    for (int64_t v : from) f += (f.empty() ? "[" : ", ") + std::to_string(v);
    f += "]";
  }
  std::string a;
  for (const YoloArg& v : args) a += (a.empty() ? "" : ", ") + v.str();
  return "[" + f + ", " + std::to_string(repeats) + ", " + module + ", [" + a + "]]";
}

namespace {
using Args = std::vector<YoloArg>;
YoloRow row(std::vector<int64_t> from, int64_t n, const char* module, Args args) {
  return {std::move(from), n, module, std::move(args)};
}
}  // namespace

YoloDescription yolov8_description() {
  YoloDescription d;
  d.source = "yolov8.yaml (built in)";
  d.scales = {{"n", 0.33, 0.25, 1024},
              {"s", 0.33, 0.50, 1024},
              {"m", 0.67, 0.75, 768},
              {"l", 1.00, 1.00, 512},
              {"x", 1.00, 1.25, 512}};
  d.backbone = {
      row({-1}, 1, "Conv", {64, 3, 2}),    // 0-P1/2
      row({-1}, 1, "Conv", {128, 3, 2}),   // 1-P2/4
      row({-1}, 3, "C2f", {128, true}),    // 2
      row({-1}, 1, "Conv", {256, 3, 2}),   // 3-P3/8
      row({-1}, 6, "C2f", {256, true}),    // 4
      row({-1}, 1, "Conv", {512, 3, 2}),   // 5-P4/16
      row({-1}, 6, "C2f", {512, true}),    // 6
      row({-1}, 1, "Conv", {1024, 3, 2}),  // 7-P5/32
      row({-1}, 3, "C2f", {1024, true}),   // 8
      row({-1}, 1, "SPPF", {1024, 5}),     // 9
  };
  d.head = {
      row({-1}, 1, "nn.Upsample", {nullptr, 2, "nearest"}),  // 10
      row({-1, 6}, 1, "Concat", {1}),                        // 11: cat backbone P4
      row({-1}, 3, "C2f", {512}),                            // 12
      row({-1}, 1, "nn.Upsample", {nullptr, 2, "nearest"}),  // 13
      row({-1, 4}, 1, "Concat", {1}),                        // 14: cat backbone P3
      row({-1}, 3, "C2f", {256}),                            // 15 (P3/8-small)
      row({-1}, 1, "Conv", {256, 3, 2}),                     // 16
      row({-1, 12}, 1, "Concat", {1}),                       // 17: cat head P4
      row({-1}, 3, "C2f", {512}),                            // 18 (P4/16-medium)
      row({-1}, 1, "Conv", {512, 3, 2}),                     // 19
      row({-1, 9}, 1, "Concat", {1}),                        // 20: cat head P5
      row({-1}, 3, "C2f", {1024}),                           // 21 (P5/32-large)
      row({15, 18, 21}, 1, "Detect", {"nc"}),                // 22: Detect(P3, P4, P5)
  };
  return d;
}

YoloDescription yolo11_description() {
  YoloDescription d;
  d.source = "yolo11.yaml (built in)";
  d.scales = {{"n", 0.50, 0.25, 1024},
              {"s", 0.50, 0.50, 1024},
              {"m", 0.50, 1.00, 512},
              {"l", 1.00, 1.00, 512},
              {"x", 1.00, 1.50, 512}};
  d.backbone = {
      row({-1}, 1, "Conv", {64, 3, 2}),          // 0-P1/2
      row({-1}, 1, "Conv", {128, 3, 2}),         // 1-P2/4
      row({-1}, 2, "C3k2", {256, false, 0.25}),  // 2
      row({-1}, 1, "Conv", {256, 3, 2}),         // 3-P3/8
      row({-1}, 2, "C3k2", {512, false, 0.25}),  // 4
      row({-1}, 1, "Conv", {512, 3, 2}),         // 5-P4/16
      row({-1}, 2, "C3k2", {512, true}),         // 6
      row({-1}, 1, "Conv", {1024, 3, 2}),        // 7-P5/32
      row({-1}, 2, "C3k2", {1024, true}),        // 8
      row({-1}, 1, "SPPF", {1024, 5}),           // 9
      row({-1}, 2, "C2PSA", {1024}),             // 10
  };
  d.head = {
      row({-1}, 1, "nn.Upsample", {nullptr, 2, "nearest"}),  // 11
      row({-1, 6}, 1, "Concat", {1}),                        // 12: cat backbone P4
      row({-1}, 2, "C3k2", {512, false}),                    // 13
      row({-1}, 1, "nn.Upsample", {nullptr, 2, "nearest"}),  // 14
      row({-1, 4}, 1, "Concat", {1}),                        // 15: cat backbone P3
      row({-1}, 2, "C3k2", {256, false}),                    // 16 (P3/8-small)
      row({-1}, 1, "Conv", {256, 3, 2}),                     // 17
      row({-1, 13}, 1, "Concat", {1}),                       // 18: cat head P4
      row({-1}, 2, "C3k2", {512, false}),                    // 19 (P4/16-medium)
      row({-1}, 1, "Conv", {512, 3, 2}),                     // 20
      row({-1, 10}, 1, "Concat", {1}),                       // 21: cat head P5
      row({-1}, 2, "C3k2", {1024, true}),                    // 22 (P5/32-large)
      row({16, 19, 22}, 1, "Detect", {"nc"}),                // 23: Detect(P3, P4, P5)
  };
  return d;
}

bool is_yolo_yaml_path(const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".yaml") || ends(".yml");
}

namespace {

template <class T>
bool parse_whole(const std::string& s, T& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// A scalar as Python's YAML + literal_eval reads it (quoted scalars stay names).
YoloArg scalar_arg(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return YoloArg(s);  // quoted
  int64_t i = 0;
  if (parse_whole(s, i)) return YoloArg(i);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size()) return YoloArg(d);
  if (s == "True" || s == "true" || s == "TRUE") return YoloArg(true);
  if (s == "False" || s == "false" || s == "FALSE") return YoloArg(false);
  if (s == "None" || s == "null" || s == "Null" || s == "NULL" || s == "~" || s.empty())
    return YoloArg(nullptr);
  return YoloArg(s);
}

int64_t node_int(const YAML::Node& n, const std::string& what) {
  int64_t v = 0;
  if (!n.IsScalar() || !parse_whole(n.Scalar(), v)) throw InputError(what + " must be an integer");
  return v;
}

double node_real(const YAML::Node& n, const std::string& what) {
  char* end = nullptr;
  const std::string s = n.IsScalar() ? n.Scalar() : std::string();
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) throw InputError(what + " must be a number");
  return d;
}

YoloRow parse_row(const YAML::Node& n, const std::string& where) {
  const std::string at = where + " (line " + std::to_string(n.Mark().line + 1) + ")";
  if (!n.IsSequence() || n.size() != 4)
    throw InputError(at + ": a row is [from, repeats, module, args]");
  YoloRow r;
  r.line = n.Mark().line + 1;
  try {
    if (n[0].IsSequence()) {
      for (const YAML::Node& f : n[0]) r.from.push_back(node_int(f, "from"));
    } else {
      r.from.push_back(node_int(n[0], "from"));
    }
    r.repeats = node_int(n[1], "repeats");
    if (!n[2].IsScalar()) throw InputError("module must be a name");
    r.module = n[2].Scalar();
    if (!n[3].IsSequence()) throw InputError("args must be a list");
    for (const YAML::Node& a : n[3]) {
      if (!a.IsScalar() && !a.IsNull())
        throw InputError("args must be numbers, True/False, None or names");
      r.args.push_back(a.IsNull() ? YoloArg(nullptr) : scalar_arg(a));
    }
  } catch (const InputError& e) {
    throw InputError(at + ": " + e.what());
  }
  return r;
}

// Ultralytics' guess_model_scale: the letter after yolo(e-)?v?<digits> in the file's stem.
std::string scale_from_name(const std::string& file) {
  std::string stem =
      file.substr(file.find_last_of('/') == std::string::npos ? 0 : file.find_last_of('/') + 1);
  stem = stem.substr(0, stem.find_last_of('.'));
  std::smatch m;
  static const std::regex re("yolo(e-)?v?\\d+([nslmx])");
  return std::regex_search(stem, m, re) ? m[2].str() : std::string();
}

void parse_scales(const YAML::Node& scales, YoloDescription& d) {
  if (!scales.IsMap()) throw InputError("scales must map a name to [depth, width, max_channels]");
  for (const auto& kv : scales) {
    const std::string name = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (!v.IsSequence() || v.size() != 3)
      throw InputError("scale " + name + " must be [depth, width, max_channels]");
    d.scales.push_back({name, node_real(v[0], "scale " + name + " depth"),
                        node_real(v[1], "scale " + name + " width"),
                        node_int(v[2], "scale " + name + " max_channels")});
  }
}

}  // namespace

YoloDescription parse_yolo_yaml(const std::string& text, const std::string& file_name) {
  YoloDescription d;
  d.source = file_name;
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) throw InputError("not a YAML map (expected nc, scales, backbone, head)");
    static const char* const known[] = {
        "nc",      "scales",         "scale",          "backbone", "head",     "reg_max",
        "end2end", "depth_multiple", "width_multiple", "ch",       "yaml_file"};
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar();
      if (std::find(std::begin(known), std::end(known), key) == std::end(known))
        throw InputError("key '" + key +
                         "' is not supported (known: nc, scales, scale, backbone, "
                         "head, reg_max, end2end, depth_multiple, width_multiple, ch)");
    }
    if (root["nc"]) d.nc = node_int(root["nc"], "nc");
    if (root["ch"] && node_int(root["ch"], "ch") != 3)
      throw InputError("ch: only 3 input channels");
    if (root["reg_max"]) d.reg_max = node_int(root["reg_max"], "reg_max");
    if (root["end2end"]) d.end2end = root["end2end"].as<bool>(false);
    if (root["scales"]) {
      parse_scales(root["scales"], d);
    } else {  // one scale from depth_multiple and width_multiple (default 1), no channel cap
      d.scales.push_back(
          {"", root["depth_multiple"] ? node_real(root["depth_multiple"], "depth_multiple") : 1.0,
           root["width_multiple"] ? node_real(root["width_multiple"], "width_multiple") : 1.0,
           std::numeric_limits<int32_t>::max()});
    }
    if (root["scales"]) {  // the file name's letter (as Ultralytics), else the scale key
      d.scale = scale_from_name(file_name);
      if (d.scale.empty() && root["scale"]) d.scale = root["scale"].Scalar();
    }
    for (const char* part : {"backbone", "head"}) {
      const YAML::Node rows = root[part];
      if (!rows || !rows.IsSequence())
        throw InputError(std::string(part) + " must be a list of rows");
      auto& out = std::string(part) == "backbone" ? d.backbone : d.head;
      for (size_t i = 0; i < rows.size(); ++i)
        out.push_back(parse_row(rows[i], std::string(part) + " row " + std::to_string(i)));
    }
  } catch (const YAML::Exception& e) {
    throw InputError(file_name + ": not valid YAML: " + e.what());
  } catch (const InputError& e) {
    throw InputError(file_name + ": " + e.what());
  }
  return d;
}

YoloDescription read_yolo_yaml(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read the model YAML '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_yolo_yaml(ss.str(), path);
}

}  // namespace hpcnet::nn
