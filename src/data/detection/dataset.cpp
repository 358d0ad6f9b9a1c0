// Object detection datasets (load_detection_dataset): Ultralytics' dataset YAML with images/ and
// labels/ folders, and COCO instances JSON, from a folder or a .tar/.tar.gz read in memory through
// one FileTree. Label rows and JSON fields are checked as they are read (FILE:LINE or the field
// named); images are read and decoded on all cores, and the dataset's order (image path, or COCO
// image id) does not depend on the thread count. Boxes are stored as pixel corners of the decoded
// image.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>

#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"
#include "src/data/tar_index.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

using detail::FileTree;
using detail::YoloRow;

// A coordinate this far outside 0..1 is a rounding excursion (1.0000001) and clamped; further is
// an error. COCO boxes may overhang their image by up to a pixel (they do in COCO itself).
constexpr double kCoordTolerance = 1e-5;
constexpr double kCocoPixelTolerance = 1.0;
constexpr int64_t kMaxClasses = 100'000;

// A piece of outside text for a one-line message: at most 40 characters, control bytes as '?'.
std::string shown(std::string_view t) {
  std::string s;
  for (size_t i = 0; i < t.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    s.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
  }
  if (t.size() > 40) s += "...";
  return s;
}

std::string num_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A finite decimal number (an optional leading '+', as Python's float()); false otherwise.
bool parse_number(std::string_view t, double* out) {
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  if (t.empty() || t[0] == '+') return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *out);
  return ec == std::errc() && end == t.data() + t.size() && std::isfinite(*out);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_yaml_name(const std::string& name) {
  const std::string n = detail::to_lower(name);
  return ends_with(n, ".yaml") || ends_with(n, ".yml");
}

std::string base_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The folder of a path ("" for a bare name).
std::string parent_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// ---------------------------------------------------------------------------------------------
// Finding the YAML or JSON of a split.
// ---------------------------------------------------------------------------------------------

struct SplitWord {
  size_t pos = std::string::npos, len = 0;  // the word (train, val or test) in the name
  std::string token;                        // the word and the digits after it: "val2017"
};

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

struct Located {
  bool coco = false;
  std::string file;   // the YAML or the JSON (tree path); "" when nothing was found
  bool found = true;  // the JSON of the split exists
  bool named = true;  // its name holds a split word (else it serves any split asked for)
};

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

struct Source {
  FileTree tree;
  Located where;
};

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

// ---------------------------------------------------------------------------------------------
// Reading and decoding the images.
// ---------------------------------------------------------------------------------------------

struct Item {
  std::string path;               // in the tree
  std::string name;               // item_name(): below the root
  std::vector<YoloRow> rows;      // yolo
  std::vector<Box> boxes;         // coco: in pixels of (width, height)
  int64_t width = 0, height = 0;  // coco: the JSON's size (0: none)
  int64_t id = 0;                 // coco image id
};

// The lazy dataset of the items: boxes from a yolo item's rows in the pixels of whatever its image
// decodes to, a coco item's boxes checked against its JSON size when it is read.
std::shared_ptr<Dataset> lazy_items(const FileTree& t, std::vector<Item>& items,
                                    std::vector<std::string> classes, bool coco,
                                    std::string description, int64_t* objects) {
  auto ds = std::make_shared<detail::LazyDataset>(t.store(), std::move(classes),
                                                  TargetKind::kBoxes, "detect",
                                                  std::move(description));
  ds->reserve(items.size());
  for (Item& it : items) {
    detail::LazyItem li;
    li.image = t.ref(it.path);
    li.name = std::move(it.name);
    if (coco) {
      li.width = static_cast<int32_t>(it.width);
      li.height = static_cast<int32_t>(it.height);
      ds->add_boxes(std::move(li), it.boxes);
    } else {
      ds->add_rows(std::move(li), it.rows);
    }
    it.rows = {};
    it.boxes = {};
  }
  *objects = ds->objects();
  return ds;
}

// item_name(): p below root, else p itself.
std::string name_below(const FileTree& t, const std::string& root, const std::string& p) {
  if (t.is_archive()) {
    if (root.empty()) return p;
    return p.compare(0, root.size() + 1, root + "/") == 0 ? p.substr(root.size() + 1) : p;
  }
  const std::string rel =
      fs::path(p).lexically_relative(root.empty() ? "." : root).generic_string();
  return rel.empty() || rel == "." || rel.rfind("..", 0) == 0 ? p : rel;
}

// Ultralytics' img2label_paths: the last folder named `images` on the path becomes `labels`, the
// extension becomes .txt (no such folder: the label file lies beside the image).
std::string label_path(const std::string& image) {
  const size_t slash = image.rfind('/');
  const size_t file_begin = slash == std::string::npos ? 0 : slash + 1;
  std::string p = image;
  const size_t dot = p.rfind('.');
  if (dot != std::string::npos && dot >= file_begin) p.erase(dot);
  p += ".txt";
  size_t found = std::string::npos;
  for (size_t b = 0; b < file_begin;) {
    size_t e = p.find('/', b);
    if (e == std::string::npos || e >= file_begin) e = file_begin - 1;
    if (e - b == 6 && p.compare(b, 6, "images") == 0) found = b;
    b = e + 1;
  }
  if (found != std::string::npos) p.replace(found, 6, "labels");
  return p;
}

DetectionData load_yolo(Source& s, const std::string& split, DetectionReport report) {
  FileTree& t = s.tree;
  const std::string yaml_file = s.where.file;
  const std::string yaml_display = t.display(yaml_file);
  const detail::DetectionYaml y = detail::parse_detection_yaml(t.text(yaml_file), yaml_display);
  const std::string yaml_dir = parent_of(yaml_file);
  // The root: `path` (relative to the YAML's folder), else the YAML's folder.
  std::string root = yaml_dir;
  if (!y.path.empty()) {
    const std::string p = t.join(yaml_dir, y.path);
    if (t.is_archive()) {
      if (!fs::path(y.path).is_absolute() && t.inside(p) && t.is_dir(p)) root = p;
    } else if (t.is_dir(p)) {
      root = p;
    } else {
      report.notes.push_back("path " + shown(y.path) + " of " + yaml_display +
                             " is not a folder; reading " + t.display_dir(yaml_dir) +
                             " (the YAML's folder) instead");
    }
  }
  const std::vector<std::string>& dirs = split == "train" ? y.train
                                         : split == "val" ? y.val
                                                          : y.test;
  HPCNET_REQUIRE(!dirs.empty(), "detect: " + yaml_display + " has no '" + split + "' (add " +
                                    split + ": images/" + split + ")");
  std::vector<std::string> image_files;
  for (const std::string& d : dirs) {
    HPCNET_REQUIRE(!ends_with(detail::to_lower(d), ".txt"),
                   "detect: " + yaml_display + ": " + split + ": " + shown(d) +
                       " is an image list; only folders of images are read, give the folder");
    const std::string dir = t.join(root, d);
    HPCNET_REQUIRE(t.inside(dir) && t.is_dir(dir), "detect: " + yaml_display + ": " + split +
                                                       " folder " + shown(d) + " (" +
                                                       t.display(dir) + ") does not exist");
    std::vector<std::string> broken;
    std::vector<std::string> found = t.list_images(dir, &broken);
    HPCNET_REQUIRE(
        !found.empty() || !broken.empty(),
        "detect: " + t.display_dir(dir) + " holds no images (.jpg, .jpeg, .png) for " + split);
    HPCNET_REQUIRE(!found.empty(), "detect: " + t.display_dir(dir) + " holds no images for " +
                                       split + ", only " + std::to_string(broken.size()) +
                                       " links that lead nowhere (first: " + broken[0] +
                                       "); fix or remove the links");
    if (!broken.empty() && report.broken_links == 0) report.first_broken_link = broken[0];
    report.broken_links += static_cast<int64_t>(broken.size());
    image_files.insert(image_files.end(), found.begin(), found.end());
  }
  std::sort(image_files.begin(), image_files.end());
  image_files.erase(std::unique(image_files.begin(), image_files.end()), image_files.end());

  std::vector<Item> items(image_files.size());
  std::vector<std::string> labels(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].path = image_files[i];
    items[i].name = name_below(t, root, image_files[i]);
    labels[i] = label_path(image_files[i]);
  }
  const int64_t nc = static_cast<int64_t>(y.names.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (!t.is_file(labels[i])) {
      if (report.missing_labels++ == 0) report.first_missing = t.display(labels[i]);
      continue;
    }
    int64_t dups = 0, dup_line = 0;
    items[i].rows =
        detail::parse_yolo_label(t.text(labels[i]), t.display(labels[i]), nc, &dups, &dup_line);
    if (items[i].rows.empty() && dups == 0 && report.empty_labels++ == 0)
      report.first_empty = t.display(labels[i]);
    if (dups > 0) {
      if (report.duplicate_files++ == 0)
        report.first_duplicate = t.display(labels[i]) + ":" + std::to_string(dup_line);
      report.duplicates += dups;
    }
    for (const YoloRow& r : items[i].rows) report.polygons += r.polygon ? 1 : 0;
  }
  DetectionData out;
  out.dataset = lazy_items(t, items, y.names, false,
                           "detect " + split + " (yolo) from " + t.display_dir(root),
                           &report.objects);
  out.classes = y.names;
  for (int64_t i = 0; i < out.dataset->size(); ++i) out.image_ids.push_back(i);
  report.images = out.dataset->size();
  out.report = std::move(report);
  return out;
}

DetectionData load_coco(Source& s, const std::string& split, const DetectionOptions& options,
                        DetectionReport report) {
  FileTree& t = s.tree;
  const std::string json = s.where.file;
  const std::string json_display = t.display(json);
  HPCNET_REQUIRE(s.where.found, "detect: no COCO JSON for split " + split + ": " + json_display +
                                    " does not exist");
  detail::CocoInstances c = detail::parse_coco_instances(t.text(json), json_display);
  HPCNET_REQUIRE(!c.images.empty(), "detect: " + json_display + " lists no images");
  // Where file_name is relative to.
  std::vector<std::string> bases;
  if (!options.coco_images.empty()) {
    bases.push_back(t.join("", options.coco_images));
  } else {
    std::string base = parent_of(json);
    if (base_name(base) == "annotations") base = parent_of(base);
    const std::string token = split_word(base_name(json)).token;
    bases.push_back(base);
    if (!token.empty()) {
      bases.push_back(t.join(base, "images/" + token));
      bases.push_back(t.join(base, token));
    }
    bases.push_back(t.join(base, "images"));
  }
  size_t best = 0;
  int64_t best_hits = -1;
  const size_t probe = std::min<size_t>(c.images.size(), 16);
  for (size_t b = 0; b < bases.size(); ++b) {
    int64_t hits = 0;
    for (size_t i = 0; i < probe; ++i) hits += t.is_file(t.join(bases[b], c.images[i].file_name));
    if (hits > best_hits) {
      best = b;
      best_hits = hits;
    }
  }
  if (best_hits == 0) {
    std::string tried;
    for (const std::string& b : bases) tried += (tried.empty() ? "" : ", ") + t.display_dir(b);
    throw InputError("detect: " + json_display + ": image id " + std::to_string(c.images[0].id) +
                     " file_name " + shown(c.images[0].file_name) + " is not in " + tried +
                     (options.coco_images.empty() ? "; put the images there" : ""));
  }
  const std::string base = bases[best];
  std::vector<Item> items(c.images.size());
  for (size_t i = 0; i < items.size(); ++i) {
    detail::CocoImage& im = c.images[i];
    Item& it = items[i];
    it.path = t.join(base, im.file_name);
    if (std::string target; !t.is_archive() && detail::is_broken_link(it.path, &target))
      throw InputError("detect: " + json_display + ": image id " + std::to_string(im.id) +
                       " file_name " + shown(im.file_name) + ": " + t.display(it.path) +
                       " is a link to " + target +
                       ", which leads nowhere; fix the link or "
                       "remove the image from the JSON");
    HPCNET_REQUIRE(t.inside(it.path) && t.is_file(it.path),
                   "detect: " + json_display + ": image id " + std::to_string(im.id) +
                       " file_name " + shown(im.file_name) + ": no such file " +
                       t.display(it.path) + "; add it or remove the image from the JSON");
    it.name = im.file_name;
    it.boxes = std::move(im.boxes);
    it.width = im.width;
    it.height = im.height;
    it.id = im.id;
  }
  report.crowd = c.crowd;
  report.degenerate = c.degenerate;
  DetectionData out;
  out.dataset = lazy_items(t, items, c.classes, true,
                           "detect " + split + " (coco) from " + json_display, &report.objects);
  out.classes = c.classes;
  out.category_ids = c.category_ids;
  for (const Item& it : items) out.image_ids.push_back(it.id);
  report.images = out.dataset->size();
  out.report = std::move(report);
  return out;
}

// ---- JSON field helpers for parse_coco_instances ---------------------------------------------

using Json = nlohmann::json;

struct CocoReader {
  const std::string& file;
  InputError error(const std::string& field, const std::string& what) const {
    return InputError("detect: " + file + ": " + field + ": " + what);
  }
  // An integer (an integral float too, as some writers give 640.0).
  int64_t integer(const Json& o, const char* key, const std::string& where, bool required,
                  int64_t dflt = 0) const {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) throw error(where, std::string("no \"") + key + "\"");
      return dflt;
    }
    const std::string field = where + "." + key;
    if (it->is_boolean()) return it->get<bool>() ? 1 : 0;
    if (it->is_number_unsigned()) {
      const uint64_t u = it->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw error(field, "integer out of range");
      return static_cast<int64_t>(u);
    }
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0)
        return static_cast<int64_t>(d);
    }
    throw error(field, "expected an integer, got " + shown(it->dump()));
  }
  std::string string(const Json& o, const char* key, const std::string& where) const {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string())
      throw error(where, std::string("expected a string \"") + key + "\"");
    return it->get<std::string>();
  }
  const Json& array(const Json& o, const char* key, bool required) const {
    static const Json empty = Json::array();
    auto it = o.find(key);
    if (it == o.end() || (it->is_null() && !required)) {
      if (required)
        throw error(key, "missing (a COCO instances JSON has images, annotations, categories)");
      return empty;
    }
    if (!it->is_array()) throw error(key, "expected an array");
    return *it;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// The parsers (detail, fuzzed in fuzz/).
// ---------------------------------------------------------------------------------------------

namespace detail {

std::vector<YoloRow> parse_yolo_label(const std::string& text, const std::string& file,
                                      int64_t num_classes, int64_t* duplicates,
                                      int64_t* first_duplicate_line) {
  HPCNET_CHECK(num_classes >= 1, "parse_yolo_label: num_classes must be >= 1");
  std::vector<YoloRow> rows;
  std::set<std::tuple<int64_t, double, double, double, double>> seen;
  std::vector<std::string_view> tok;
  std::vector<double> v;
  int64_t line_no = 0;
  // A UTF-8 byte order mark (files from Windows tools) is not part of the first row.
  const size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (size_t pos = start; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    tok.clear();
    for (size_t i = 0; i < line.size();) {
      auto space = [](char c) {
        return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
      };
      while (i < line.size() && space(line[i])) ++i;
      const size_t b = i;
      while (i < line.size() && !space(line[i])) ++i;
      if (i > b) tok.push_back(line.substr(b, i - b));
    }
    if (tok.empty()) continue;
    auto fail = [&](const std::string& what) {
      return InputError("detect: " + file + ":" + std::to_string(line_no) + ": " + what);
    };
    const size_t n = tok.size();
    const bool polygon = n >= 7 && n % 2 == 1;
    if (n != 5 && !polygon)
      throw fail(std::to_string(n) + (n == 1 ? " column" : " columns") +
                 "; expected 5 (class cx cy w h, normalised to 0..1) or a polygon of 3 or more "
                 "points (class x1 y1 x2 y2 x3 y3 ...)");
    v.resize(n);
    for (size_t k = 0; k < n; ++k)
      if (!parse_number(tok[k], &v[k]))
        throw fail("column " + std::to_string(k + 1) + " '" + shown(tok[k]) + "' is not a number");
    if (v[0] != std::floor(v[0]) || v[0] < 0 || v[0] >= static_cast<double>(num_classes))
      throw fail("class " + shown(tok[0]) +
                 (v[0] != std::floor(v[0]) ? " is not an integer"
                                           : " is outside 0.." + std::to_string(num_classes - 1)) +
                 " (" + std::to_string(num_classes) + " class names); fix the row or the names");
    static const char* kBoxCols[] = {"class", "cx", "cy", "w", "h"};
    for (size_t k = 1; k < n; ++k) {
      if (v[k] < -kCoordTolerance || v[k] > 1 + kCoordTolerance) {
        const std::string col =
            polygon ? std::string(k % 2 ? "x" : "y") + std::to_string((k + 1) / 2) : kBoxCols[k];
        throw fail(col + " = " + shown(tok[k]) +
                   " is outside 0..1 (coordinates are normalised by the image's width and "
                   "height)");
      }
      v[k] = std::clamp(v[k], 0.0, 1.0);
    }
    YoloRow r;
    r.cls = static_cast<int64_t>(v[0]);
    r.polygon = polygon;
    r.line = line_no;
    if (polygon) {
      r.x1 = r.y1 = 1;
      r.x2 = r.y2 = 0;
      for (size_t k = 1; k + 1 < n; k += 2) {
        r.x1 = std::min(r.x1, v[k]);
        r.x2 = std::max(r.x2, v[k]);
        r.y1 = std::min(r.y1, v[k + 1]);
        r.y2 = std::max(r.y2, v[k + 1]);
      }
    } else {
      r.x1 = std::clamp(v[1] - v[3] / 2, 0.0, 1.0);
      r.x2 = std::clamp(v[1] + v[3] / 2, 0.0, 1.0);
      r.y1 = std::clamp(v[2] - v[4] / 2, 0.0, 1.0);
      r.y2 = std::clamp(v[2] + v[4] / 2, 0.0, 1.0);
    }
    if (!seen.emplace(r.cls, r.x1, r.y1, r.x2, r.y2).second) {
      if (duplicates) {
        if (*duplicates == 0 && first_duplicate_line) *first_duplicate_line = line_no;
        ++*duplicates;
      }
      continue;
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Box> yolo_rows_to_boxes(const std::vector<YoloRow>& rows, int64_t height,
                                    int64_t width) {
  std::vector<Box> boxes;
  boxes.reserve(rows.size());
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  for (const YoloRow& r : rows)
    boxes.push_back({r.cls, static_cast<float>(r.x1 * w), static_cast<float>(r.y1 * h),
                     static_cast<float>(r.x2 * w), static_cast<float>(r.y2 * h)});
  return boxes;
}

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

CocoInstances parse_coco_instances(const std::string& text, const std::string& file) {
  const CocoReader r{file};
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw InputError("detect: " + file + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object())
    throw r.error("top level", "expected an object with images, annotations, categories");
  CocoInstances c;
  // Categories: class k is the k-th by ascending id.
  std::map<int64_t, std::string> cats;
  const Json& jc = r.array(j, "categories", true);
  for (size_t i = 0; i < jc.size(); ++i) {
    const std::string where = "categories[" + std::to_string(i) + "]";
    if (!jc[i].is_object()) throw r.error(where, "expected an object with id and name");
    const int64_t id = r.integer(jc[i], "id", where, true);
    if (!cats.emplace(id, r.string(jc[i], "name", where)).second)
      throw r.error(where, "category id " + std::to_string(id) + " appears twice");
    if (static_cast<int64_t>(cats.size()) > kMaxClasses)
      throw r.error("categories", "over " + std::to_string(kMaxClasses) + " classes");
  }
  if (cats.empty()) throw r.error("categories", "empty; name at least one class");
  std::map<int64_t, int64_t> class_of;
  for (auto& [id, name] : cats) {
    class_of[id] = static_cast<int64_t>(c.classes.size());
    c.category_ids.push_back(id);
    c.classes.push_back(std::move(name));
  }
  // Images.
  std::map<int64_t, size_t> image_of;
  const Json& ji = r.array(j, "images", true);
  c.images.reserve(ji.size());
  for (size_t i = 0; i < ji.size(); ++i) {
    const std::string where = "images[" + std::to_string(i) + "]";
    if (!ji[i].is_object())
      throw r.error(where, "expected an object with id, file_name, width, height");
    CocoImage im;
    im.id = r.integer(ji[i], "id", where, true);
    im.file_name = r.string(ji[i], "file_name", where);
    if (im.file_name.empty()) throw r.error(where + ".file_name", "empty");
    im.width = r.integer(ji[i], "width", where, true);
    im.height = r.integer(ji[i], "height", where, true);
    if (im.width < 1 || im.height < 1 || im.width >= (1 << 30) || im.height >= (1 << 30))
      throw r.error(where, "size " + std::to_string(im.width) + "x" + std::to_string(im.height) +
                               " is not a positive image size");
    if (!image_of.emplace(im.id, c.images.size()).second)
      throw r.error(where, "image id " + std::to_string(im.id) + " appears twice");
    c.images.push_back(std::move(im));
  }
  // Annotations.
  const Json& ja = r.array(j, "annotations", false);
  for (size_t i = 0; i < ja.size(); ++i) {
    std::string where = "annotations[" + std::to_string(i) + "]";
    const Json& a = ja[i];
    if (!a.is_object()) throw r.error(where, "expected an object with image_id, category_id, bbox");
    if (a.contains("id") && (a["id"].is_number_integer() || a["id"].is_number_unsigned()))
      where += " (id " + shown(a["id"].dump()) + ")";
    const int64_t image_id = r.integer(a, "image_id", where, true);
    const int64_t category_id = r.integer(a, "category_id", where, true);
    const int64_t crowd = r.integer(a, "iscrowd", where, false, 0);
    auto im = image_of.find(image_id);
    if (im == image_of.end())
      throw r.error(where, "image_id " + std::to_string(image_id) + " is not in images");
    auto cls = class_of.find(category_id);
    if (cls == class_of.end())
      throw r.error(where, "category_id " + std::to_string(category_id) + " is not in categories");
    if (crowd != 0 && crowd != 1)
      throw r.error(where, "iscrowd " + std::to_string(crowd) + " is not 0 or 1");
    auto bb = a.find("bbox");
    if (bb == a.end() || !bb->is_array() || bb->size() != 4)
      throw r.error(where, "bbox must be [x, y, width, height] in pixels");
    double v[4];
    for (size_t k = 0; k < 4; ++k) {
      const Json& e = (*bb)[k];
      if (!e.is_number() || !std::isfinite(e.get<double>()))
        throw r.error(where,
                      "bbox[" + std::to_string(k) + "] " + shown(e.dump()) + " is not a number");
      v[k] = e.get<double>();
    }
    const std::string box = "bbox [" + num_str(v[0]) + ", " + num_str(v[1]) + ", " + num_str(v[2]) +
                            ", " + num_str(v[3]) + "]";
    if (v[2] < 0 || v[3] < 0) throw r.error(where, box + " has a negative width or height");
    // Crowd regions and boxes of zero width or height are kept, as pycocotools keeps them (an
    // ignore region; an object nothing can match); detect::targets_of leaves them out of training.
    c.crowd += crowd ? 1 : 0;
    c.degenerate += !crowd && (v[2] == 0 || v[3] == 0) ? 1 : 0;
    // COCO's "area" (the object's mask area in make_scenes.py and COCO itself), for the metric's
    // area ranges; absent: the box's.
    float area = -1;
    if (auto ar = a.find("area"); ar != a.end()) {
      if (!ar->is_number() || !std::isfinite(ar->get<double>()) || ar->get<double>() < 0)
        throw r.error(where, "area " + shown(ar->dump()) + " is not a number >= 0");
      area = static_cast<float>(ar->get<double>());
    }
    CocoImage& img = c.images[im->second];
    const double w = static_cast<double>(img.width), h = static_cast<double>(img.height);
    if (v[0] < -kCocoPixelTolerance || v[1] < -kCocoPixelTolerance ||
        v[0] + v[2] > w + kCocoPixelTolerance || v[1] + v[3] > h + kCocoPixelTolerance)
      throw r.error(where, box + " is outside image id " + std::to_string(image_id) + " (" +
                               std::to_string(img.width) + "x" + std::to_string(img.height) +
                               ") by more than a pixel");
    img.boxes.push_back({cls->second, static_cast<float>(std::clamp(v[0], 0.0, w)),
                         static_cast<float>(std::clamp(v[1], 0.0, h)),
                         static_cast<float>(std::clamp(v[0] + v[2], 0.0, w)),
                         static_cast<float>(std::clamp(v[1] + v[3], 0.0, h)), area, crowd == 1});
    c.annotations++;
  }
  std::sort(c.images.begin(), c.images.end(),
            [](const CocoImage& a, const CocoImage& b) { return a.id < b.id; });
  return c;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// The public API.
// ---------------------------------------------------------------------------------------------

std::string DetectionReport::no_objects() const {
  if (objects > 0 || images == 0) return "";
  std::string s = "no labels found in " + source + ": every image of " + split + " (" +
                  std::to_string(images) + ") has no objects";
  if (format == "coco") return s + "; check that its annotations name these images' ids";
  const std::string first = missing_labels > 0 ? first_missing : first_empty;
  auto have = [](int64_t n) { return std::to_string(n) + (n == 1 ? " has" : " have"); };
  if (missing_labels > 0)
    s += ": " + have(missing_labels) + " no label file (first: " + first_missing + ")";
  if (empty_labels > 0)
    s += std::string(missing_labels > 0 ? ", " : ": ") + have(empty_labels) + " an empty one" +
         (missing_labels > 0 ? "" : " (first: " + first_empty + ")");
  const std::string dir = fs::path(first).parent_path().string();
  return s + "; check " + (dir.empty() ? std::string("the labels folder") : dir + "/") +
         " (one NAME.txt per image NAME.jpg, rows 'class cx cy w h')";
}

std::vector<std::string> DetectionReport::lines() const {
  std::vector<std::string> out;
  if (broken_links > 0)
    out.push_back("detect: " + std::to_string(broken_links) + " of " +
                  std::to_string(images + broken_links) + " images of " + split +
                  " are links that lead nowhere and are left out (first: " + first_broken_link +
                  "); fix or remove the links");
  if (const std::string none = no_objects(); !none.empty())
    out.push_back("detect: " + none);
  else if (missing_labels > 0)
    out.push_back("detect: " + std::to_string(missing_labels) + " of " + std::to_string(images) +
                  " images of " + split + " have no label file and are used without objects " +
                  "(first: " + first_missing + ")");
  if (duplicates > 0)
    out.push_back("detect: " + std::to_string(duplicates) + " duplicate label rows dropped in " +
                  std::to_string(duplicate_files) + " files of " + split +
                  " (first: " + first_duplicate + ")");
  if (crowd > 0)
    out.push_back("detect: " + std::to_string(crowd) + " crowd annotations (iscrowd) of " + split +
                  ": ignore regions for the metric, as pycocotools; not trained on");
  if (degenerate > 0)
    out.push_back("detect: " + std::to_string(degenerate) + " boxes of zero width or height of " +
                  split + ": objects for the metric, as pycocotools; not trained on");
  for (const std::string& n : notes) out.push_back("detect: " + n);
  return out;
}

DetectionData load_detection_dataset(const std::string& path, const std::string& split,
                                     const DetectionOptions& options) {
  Source s = locate(path, split);
  DetectionReport report;
  report.format = s.where.coco ? "coco" : "yolo";
  report.source = s.tree.display(s.where.file);
  report.split = split;
  if (s.where.coco) return load_coco(s, split, options, std::move(report));
  DetectionData d = load_yolo(s, split, std::move(report));
  // Ultralytics' class_map for a dataset other than COCO itself: class k is category k + 1.
  for (size_t k = 0; k < d.classes.size(); ++k)
    d.category_ids.push_back(static_cast<int64_t>(k) + 1);
  return d;
}

bool detection_has_split(const std::string& path, const std::string& split) {
  try {
    Source s = locate(path, split);
    if (s.where.coco) return s.where.found && (s.where.named || split == "train");
    const detail::DetectionYaml y =
        detail::parse_detection_yaml(s.tree.text(s.where.file), s.tree.display(s.where.file));
    return !(split == "train" ? y.train : split == "val" ? y.val : y.test).empty();
  } catch (const InputError&) {
    return false;
  }
}

}  // namespace hpcnet::data
