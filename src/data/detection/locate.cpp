// Finding the dataset YAML or the COCO instances JSON of a split: the file given, a folder
// holding data.yaml (or one *.yaml) or annotations/instances_<split>.json, or a .tar/.tar.gz of
// one (at its top or below one folder).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"

namespace fs = std::filesystem;

namespace hpcnet::data::detail::detection {

// The last train/val/test of a file name that stands on its own (no letter either side):
// instances_val2017.json -> val (token val2017); trainval.json -> none.
SplitWord split_word(const std::string& name) {
  SplitWord best;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  for (const char* w : {"train", "val", "test"}) {
    const size_t n = std::strlen(w);
    for (size_t p = name.find(w); p != std::string::npos; p = name.find(w, p + 1)) {
      if ((p > 0 && letter(name[p - 1])) || (p + n < name.size() && letter(name[p + n]))) continue;
      if (best.pos == std::string::npos || p > best.pos) {
        best.pos = p;
        best.len = n;
      }
    }
  }
  if (best.pos != std::string::npos) {
    size_t e = best.pos + best.len;
    while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
    best.token = name.substr(best.pos, e - best.pos);
  }
  return best;
}

namespace {

bool is_yaml_name(const std::string& name) {
  const std::string n = to_lower(name);
  return ends_with(n, ".yaml") || ends_with(n, ".yml");
}

// The JSON of `split` for a given JSON path: the sibling with that split word in its name, or
// the file itself when its name has none (*found: whether it exists; *named: whether the name
// holds a split word).
std::string coco_split_file(const FileTree& t, const std::string& json, const std::string& split,
                            bool* found, bool* named) {
  const std::string dir = parent_of(json), name = base_name(json);
  const SplitWord w = split_word(name);
  std::string file = json;
  if (w.pos != std::string::npos) {
    std::string n = name;
    n.replace(w.pos, w.len, split);
    file = dir.empty() ? n : (dir == "/" ? "/" + n : dir + "/" + n);
  }
  *found = t.is_file(file);
  *named = w.pos != std::string::npos;
  return file;
}

// instances_<split>.json or instances_<split>NNNN.json in a folder; "" when none.
std::string find_coco_json(const FileTree& t, const std::string& dir, const std::string& split) {
  if (!t.is_dir(dir)) return "";
  const std::string pre = "instances_" + split;
  for (const std::string& f : t.list_files(dir)) {
    const std::string n = base_name(f);
    if (n.rfind(pre, 0) != 0 || !ends_with(n, ".json")) continue;
    const std::string mid = n.substr(pre.size(), n.size() - pre.size() - 5);
    if (std::all_of(mid.begin(), mid.end(), [](char c) { return c >= '0' && c <= '9'; })) return f;
  }
  return "";
}

// The YAML (data.yaml, or the only *.yaml) or the COCO JSON of split in a folder of the tree.
Located find_in(const FileTree& t, const std::string& dir, const std::string& split) {
  Located l;
  if (!t.is_dir(dir)) return l;
  const std::string data_yaml = t.join(dir, "data.yaml");
  if (t.is_file(data_yaml)) {
    l.file = data_yaml;
    return l;
  }
  std::vector<std::string> yamls;
  for (const std::string& f : t.list_files(dir))
    if (is_yaml_name(f) && !detail::is_hidden_name(base_name(f))) yamls.push_back(f);
  if (yamls.size() > 1) {
    std::string names;
    for (const std::string& y : yamls) names += (names.empty() ? "" : ", ") + base_name(y);
    throw InputError("detect: " + t.display_dir(dir) + " holds several dataset YAML files (" +
                     names + "); pass the one to use as --data");
  }
  if (yamls.size() == 1) {
    l.file = yamls[0];
    return l;
  }
  for (const char* sub : {"annotations", ""}) {
    const std::string f = find_coco_json(t, *sub ? t.join(dir, sub) : dir, split);
    if (!f.empty()) {
      l.coco = true;
      l.file = f;
      return l;
    }
  }
  return l;
}

}  // namespace

Source locate(const std::string& path, const std::string& split) {
  HPCNET_REQUIRE(split == "train" || split == "val" || split == "test",
                 "detect: unknown split '" + split + "' (train, val or test)");
  Source s;
  std::error_code ec;
  const std::string hint =
      " (expected a dataset YAML, a COCO instances JSON, a folder holding data.yaml or "
      "annotations/instances_" +
      split + ".json, or a .tar/.tar.gz of one)";
  HPCNET_REQUIRE(fs::exists(path, ec), "detect: " + path + " does not exist" + hint);
  if (fs::is_directory(path, ec)) {
    s.tree = FileTree::folder("detect");
    const std::string dir = FileTree::normal(path);
    s.where = find_in(s.tree, dir, split);
    HPCNET_REQUIRE(!s.where.file.empty(), "detect: " + s.tree.display_dir(dir) +
                                              " holds no data.yaml and no annotations/instances_" +
                                              split + ".json" + hint);
    return s;
  }
  if (detail::is_archive_name(path)) {
    s.tree = FileTree::open_archive(path, "detect");
    s.where = find_in(s.tree, "", split);
    if (s.where.file.empty()) {
      // One top-level folder is looked through (scenes/data.yaml).
      std::vector<Located> hits;
      for (const std::string& d : s.tree.top_dirs()) {
        Located l = find_in(s.tree, d, split);
        if (!l.file.empty()) hits.push_back(l);
      }
      HPCNET_REQUIRE(hits.size() == 1,
                     "detect: archive " + path +
                         (hits.empty() ? " holds no data.yaml and no annotations/instances_" +
                                             split + ".json at its top or below one folder"
                                       : " holds several datasets in its top-level folders; "
                                         "unpack it and pass one"));
      s.where = hits[0];
    }
    return s;
  }
  s.tree = FileTree::folder("detect");
  const std::string lower = detail::to_lower(path);
  if (is_yaml_name(lower)) {
    s.where.file = FileTree::normal(path);
  } else if (ends_with(lower, ".json")) {
    s.where.coco = true;
    s.where.file =
        coco_split_file(s.tree, FileTree::normal(path), split, &s.where.found, &s.where.named);
  } else {
    throw InputError("detect: " + path +
                     " is a file but neither .yaml/.yml, .json nor .tar/.tar.gz" + hint);
  }
  return s;
}

}  // namespace hpcnet::data::detail::detection
