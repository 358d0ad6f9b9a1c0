// An Ultralytics dataset YAML (parse_detection_yaml, fuzzed in fuzz/fuzz_data_yaml.cpp): the
// root, each split's image folders and the class names.
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <map>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"

namespace hpcnet::data::detail {

using detection::shown;

DetectionYaml parse_detection_yaml(const std::string& text, const std::string& file) {
  DetectionYaml y;
  auto fail = [&](const std::string& what) { return InputError("detect: " + file + ": " + what); };
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) throw fail("not a YAML map (expected path, train, val, names)");
    const YAML::Node path = root["path"];
    if (path && !path.IsNull()) {
      if (!path.IsScalar()) throw fail("path is not a folder name");
      y.path = path.Scalar();
    }
    for (auto [key, out] : {std::pair<const char*, std::vector<std::string>*>{"train", &y.train},
                            {"val", &y.val},
                            {"test", &y.test}}) {
      const YAML::Node n = root[key];
      if (!n || n.IsNull()) continue;
      if (n.IsScalar()) {
        if (!n.Scalar().empty()) out->push_back(n.Scalar());
      } else if (n.IsSequence()) {
        for (const YAML::Node& e : n) {
          if (!e.IsScalar()) throw fail(std::string(key) + ": expected folder names");
          out->push_back(e.Scalar());
        }
      } else {
        throw fail(std::string(key) + ": expected a folder (or a list of folders)");
      }
    }
    const YAML::Node names = root["names"];
    if (names && names.IsSequence()) {
      for (const YAML::Node& e : names) {
        if (!e.IsScalar())
          throw fail("names: entry " + std::to_string(y.names.size()) + " is not a string");
        if (static_cast<int64_t>(y.names.size()) >= kMaxClasses)
          throw fail("names: over " + std::to_string(kMaxClasses) + " classes");
        y.names.push_back(e.Scalar());
      }
    } else if (names && names.IsMap()) {
      std::map<int64_t, std::string> by_id;
      for (const auto& kv : names) {
        int64_t k = -1;
        const std::string ks = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
        const auto [p, ec] = std::from_chars(ks.data(), ks.data() + ks.size(), k);
        if (ec != std::errc() || p != ks.data() + ks.size() || k < 0 || k >= kMaxClasses)
          throw fail("names: key '" + shown(ks) + "' is not a class number 0.." +
                     std::to_string(kMaxClasses - 1));
        if (!kv.second.IsScalar()) throw fail("names: " + std::to_string(k) + " is not a string");
        if (!by_id.emplace(k, kv.second.Scalar()).second)
          throw fail("names: class " + std::to_string(k) + " is named twice");
      }
      int64_t expect = 0;
      for (auto& [k, v] : by_id) {
        if (k != expect++)
          throw fail("names must be numbered 0, 1, ... without gaps (class " +
                     std::to_string(expect - 1) + " has no name)");
        y.names.push_back(v);
      }
    } else if (names && !names.IsNull()) {
      throw fail("names: expected a list [a, b] or a map {0: a, 1: b}");
    }
    const YAML::Node nc = root["nc"];
    if (nc && !nc.IsNull()) {
      int64_t k = -1;
      const std::string s = nc.IsScalar() ? nc.Scalar() : std::string();
      const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), k);
      if (ec != std::errc() || p != s.data() + s.size() || k < 1 || k > kMaxClasses)
        throw fail("nc '" + shown(s) + "' is not a class count 1.." + std::to_string(kMaxClasses));
      if (y.names.empty()) {
        for (int64_t c = 0; c < k; ++c) y.names.push_back("class_" + std::to_string(c));
      } else if (k != static_cast<int64_t>(y.names.size())) {
        throw fail("nc is " + std::to_string(k) + " but names has " +
                   std::to_string(y.names.size()) + " entries; make them agree");
      }
    }
  } catch (const YAML::Exception& e) {
    throw fail(std::string("not valid YAML (") + e.what() + ")");
  }
  if (y.names.empty()) throw fail("no names (add names: [a, b] or names: {0: a, 1: b})");
  return y;
}

}  // namespace hpcnet::data::detail
