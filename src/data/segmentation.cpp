// Segmentation datasets: image and class-mask pairs in the two layouts users hold, from a folder
// or a .tar (a .tar.gz decompressed once to a cached .tar; an optional single top-level folder,
// e.g. VOCdevkit/VOC2012/, is looked through). The pairs are listed and decoded lazily; the
// dataset is sorted by image name.
//   generic  images/<split>/NAME.{jpg,jpeg,png} + masks/<split>/NAME.png; class names from
//            classes.txt (one per line, line k = mask value k) or, beside an Ultralytics
//            data.yaml, "background" followed by its names (mask value 1 + k = class k). The
//            YAML itself may be given (scenes/data.yaml): its folder, or the folder its `path:`
//            names below it, is read, and its names win over a classes.txt.
//   VOC      JPEGImages/NAME.jpg, SegmentationClass/NAME.png (palette index = class),
//            ImageSets/Segmentation/<split>.txt; the 21 PASCAL VOC classes.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"
#include "src/data/tar_index.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

using detail::FileRef;
using detail::FileTree;

const std::vector<std::string>& voc_class_names() {
  static const std::vector<std::string> names = {
      "background", "aeroplane", "bicycle", "bird",  "boat",        "bottle", "bus",
      "car",        "cat",       "chair",   "cow",   "diningtable", "dog",    "horse",
      "motorbike",  "person",    "pottedplant", "sheep", "sofa",    "train",  "tvmonitor"};
  return names;
}

// The files of a dataset root that a layout may use, by path relative to the root, with where
// their bytes are in the tree's store (a path of the folder, or a member of the archive); nothing is
// read but the small text files a layout needs (classes.txt, data.yaml, the VOC split lists).
struct LayoutFiles {
  FileTree tree = FileTree::folder("segmentation");  // the folder or archive
  std::string where;                                  // the root, for messages
  std::map<std::string, FileRef> files;
  // Entries a layout would use that are links leading nowhere (a folder only): path -> target.
  std::map<std::string, std::string> broken;
  bool has(const std::string& p) const { return files.count(p) != 0; }
  // " (a link to TARGET, which leads nowhere)" when p is such a link, else "".
  std::string why_missing(const std::string& p) const {
    auto it = broken.find(p);
    return it == broken.end() ? "" : " (a link to " + it->second + ", which leads nowhere)";
  }
  const FileRef& ref(const std::string& p) const { return files.at(p); }
  std::string text(const std::string& p) const {
    std::vector<uint8_t> b;
    tree.store()->read(files.at(p), b, "segmentation");
    return std::string(b.begin(), b.end());
  }
};

// Whether a path (split into parts) may belong to a layout's split.
bool wanted(const std::vector<std::string>& parts, const std::string& split) {
  if (parts.empty()) return false;
  for (const std::string& p : parts)
    if (!p.empty() && p[0] == '.') return false;
  const std::string& top = parts[0];
  if (parts.size() == 1) return top == "classes.txt" || top == "data.yaml";
  if (top == "images" || top == "masks") return parts[1] == split;
  return top == "JPEGImages" || top == "SegmentationClass" || top == "ImageSets";
}

bool is_yaml_file(const std::string& path) {
  std::error_code ec;
  const std::string ext = detail::to_lower(fs::path(path).extension().string());
  return (ext == ".yaml" || ext == ".yml") && fs::is_regular_file(path, ec);
}

// The folder an Ultralytics dataset YAML describes: its `path:` where that names a folder
// (relative to the YAML's), else the YAML's own folder.
fs::path yaml_root(const std::string& yaml) {
  fs::path dir = fs::path(yaml).parent_path();
  if (dir.empty()) dir = ".";
  const std::vector<uint8_t> bytes = detail::read_whole_file(yaml, "segmentation", 1 << 20);
  const std::string text(bytes.begin(), bytes.end());
  std::string rel;
  try {
    const YAML::Node y = YAML::Load(text);
    if (y.IsMap() && y["path"] && y["path"].IsScalar()) rel = y["path"].Scalar();
  } catch (const YAML::Exception& e) {
    throw InputError("segmentation: " + yaml + ": " + e.what());
  }
  std::error_code ec;
  if (!rel.empty() && fs::path(rel).is_relative() && fs::is_directory(dir / rel, ec))
    return (dir / rel).lexically_normal();
  return dir;
}

// Whether a path may be one of a layout's files at the top of the tree or below one or two
// folders (VOCdevkit/VOC2012/); *prefix gets those folders ("" or "VOCdevkit/VOC2012/").
bool layout_member(const std::string& path, const std::string& split, std::string* prefix) {
  const std::vector<std::string> parts = detail::split_path(path);
  prefix->clear();
  for (size_t skip = 0; skip <= 2 && skip < parts.size(); ++skip) {
    if (wanted(std::vector<std::string>(parts.begin() + skip, parts.end()), split)) return true;
    *prefix += parts[skip] + "/";
  }
  return false;
}

// An archive's layout files: everything a layout may use is kept, and the root is the prefix
// most of them share.
LayoutFiles layout_of_archive(const std::string& path, const std::string& split) {
  HPCNET_REQUIRE(detail::is_archive_name(path),
                 "segmentation: " + path +
                     " is a file but neither a dataset YAML (.yaml/.yml) nor a "
                     ".tar/.tar.gz/.tgz archive");
  LayoutFiles t;
  t.tree = FileTree::open_archive(path, "segmentation");
  std::vector<const detail::TarMember*> entries;
  std::map<std::string, int> prefixes;  // candidate roots, by the entries below them
  for (const detail::TarMember& m : t.tree.tar().members()) {
    if (std::string prefix; layout_member(m.path, split, &prefix)) {
      entries.push_back(&m);
      prefixes[prefix]++;
    }
  }
  HPCNET_REQUIRE(!prefixes.empty(), "segmentation: archive " + path +
                                        " holds no images/ and masks/ folders nor a VOC "
                                        "layout (JPEGImages/, SegmentationClass/)");
  const std::string prefix =
      std::max_element(prefixes.begin(), prefixes.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; })
          ->first;
  for (const detail::TarMember* e : entries)  // of a path stored twice, the first
    if (e->path.compare(0, prefix.size(), prefix) == 0)
      t.files.emplace(e->path.substr(prefix.size()), detail::member_ref(*e));
  t.where = path + ":" + prefix;
  return t;
}

// A folder's layout files, walking only where a layout's files may be.
LayoutFiles layout_of_folder(const std::string& path, const std::string& split) {
  std::error_code ec;
  HPCNET_REQUIRE(fs::is_directory(path, ec), "segmentation: " + path + " does not exist");
  LayoutFiles t;
  fs::path root(path);
  // A folder holding VOCdevkit/VOC20xx/ (as torchvision downloads it) is looked through.
  for (const char* sub : {"VOCdevkit/VOC2012", "VOCdevkit/VOC2007", "VOC2012"})
    if (!fs::exists(root / "images", ec) && fs::is_directory(root / sub / "JPEGImages", ec))
      root /= sub;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path rel = it->path().lexically_relative(root);
    std::vector<std::string> parts = detail::split_path(rel.generic_string());
    std::error_code fec;
    if (it->is_directory(fec)) {
      // Descend only where a layout's files may be (images/<split>/, JPEGImages/, ...).
      const bool keep = parts.size() == 1 ? wanted({parts[0], split}, split) : wanted(parts, split);
      if (!keep) it.disable_recursion_pending();
      continue;
    }
    if (!wanted(parts, split)) continue;
    if (it->is_regular_file(fec))
      t.files.emplace(rel.generic_string(), FileRef{it->path().string()});
    else if (std::string target; detail::is_broken_link(it->path().string(), &target))
      t.broken.emplace(rel.generic_string(), std::move(target));
  }
  HPCNET_REQUIRE(!ec, "segmentation: cannot list " + root.string() + ": " + ec.message());
  t.where = root.string() + "/";
  return t;
}

LayoutFiles read_layout(const std::string& path, const std::string& split) {
  if (is_yaml_file(path)) {
    // --data scenes/data.yaml: the folder it describes, named by that YAML (over a classes.txt).
    LayoutFiles t = read_layout(yaml_root(path).string(), split);
    t.files.erase("classes.txt");
    t.files["data.yaml"] = FileRef{path};
    return t;
  }
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return layout_of_archive(path, split);
  return layout_of_folder(path, split);
}

std::string stem(const std::string& file) {
  const size_t dot = file.rfind('.');
  return dot == std::string::npos ? file : file.substr(0, dot);
}

std::vector<std::string> class_names_generic(const LayoutFiles& t) {
  // Mask values are bytes and 255 means "ignore": at most 255 classes.
  auto check_count = [&](const std::vector<std::string>& names, const char* file) {
    HPCNET_REQUIRE(names.size() <= 255, "segmentation: " + t.where + file + " names " +
                                            std::to_string(names.size()) +
                                            " classes; 8-bit masks hold at most 255 (value 255 "
                                            "= ignore)");
  };
  if (t.has("classes.txt")) {
    std::vector<std::string> names;
    std::istringstream in(t.text("classes.txt"));
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) names.push_back(line);
    }
    HPCNET_REQUIRE(!names.empty(), "segmentation: " + t.where + "classes.txt names no class");
    check_count(names, "classes.txt");
    return names;
  }
  if (t.has("data.yaml")) {
    std::vector<std::string> names =
        detail::data_yaml_class_names(t.text("data.yaml"), t.where + "data.yaml");
    check_count(names, "data.yaml");
    return names;
  }
  throw InputError("segmentation: " + t.where +
                   " has no classes.txt (one class name per line; line k names mask value k) "
                   "and no data.yaml with names; add one");
}

struct Pair {
  std::string name;       // item_name(): "images/val/000001.jpg"
  std::string mask_name;  // "masks/val/000001.png"
};

// The lazy dataset of the pairs, sorted by image name; an item's image and mask are decoded (and
// the mask checked against its image's size and the classes) when it is read.
std::shared_ptr<Dataset> lazy_pairs(const LayoutFiles& t, std::vector<Pair> pairs,
                                    std::vector<std::string> classes, std::string description) {
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.name < b.name; });
  auto ds = std::make_shared<detail::LazyDataset>(t.tree.store(), std::move(classes), TargetKind::kMask,
                                                  "segmentation", std::move(description));
  ds->reserve(pairs.size());
  for (Pair& p : pairs) {
    detail::LazyItem it;
    it.image = t.ref(p.name);
    it.mask = t.ref(p.mask_name);
    it.name = std::move(p.name);
    ds->add(std::move(it));
  }
  return ds;
}

std::shared_ptr<Dataset> load_generic(const LayoutFiles& t, const std::string& split) {
  const std::string img_dir = "images/" + split + "/", mask_dir = "masks/" + split + "/";
  std::map<std::string, const std::pair<const std::string, FileRef>*> masks;
  for (const auto& kv : t.files)
    if (kv.first.compare(0, mask_dir.size(), mask_dir) == 0 &&
        kv.first.find('/', mask_dir.size()) == std::string::npos)
      masks[stem(kv.first.substr(mask_dir.size()))] = &kv;
  auto in_dir = [](const std::string& p, const std::string& dir) {
    return p.compare(0, dir.size(), dir) == 0 && p.find('/', dir.size()) == std::string::npos &&
           detail::is_image_name(p);
  };
  std::vector<Pair> pairs;
  for (auto& kv : t.files) {
    if (!in_dir(kv.first, img_dir)) continue;
    const std::string file = kv.first.substr(img_dir.size());
    auto m = masks.find(stem(file));
    const std::string mask = mask_dir + stem(file) + ".png";
    HPCNET_REQUIRE(m != masks.end(), "segmentation: " + t.where + kv.first + " has no mask (" +
                                         mask + t.why_missing(mask) +
                                         "); add it or remove the image");
    pairs.push_back({kv.first, m->second->first});
  }
  // Images that are links leading nowhere: left out, and said once.
  int64_t broken = 0;
  std::string first;
  for (const auto& [p, target] : t.broken)
    if (in_dir(p, img_dir) && broken++ == 0) first = t.where + p + " -> " + target;
  HPCNET_REQUIRE(!pairs.empty() || broken == 0,
                 "segmentation: " + t.where + img_dir + " holds no images, only " +
                     std::to_string(broken) + " links that lead nowhere (first: " + first +
                     "); fix or remove the links");
  HPCNET_REQUIRE(!pairs.empty(), "segmentation: " + t.where + " has no images in " + img_dir +
                                     " (expected " + img_dir + "NAME.jpg with " + mask_dir +
                                     "NAME.png)");
  if (broken > 0)
    std::fprintf(stderr,
                 "segmentation: %lld of %lld images of %s are links that lead nowhere and are "
                 "left out (first: %s); fix or remove the links\n",
                 static_cast<long long>(broken),
                 static_cast<long long>(broken + static_cast<int64_t>(pairs.size())), split.c_str(),
                 first.c_str());
  return lazy_pairs(t, std::move(pairs), class_names_generic(t),
                    "segmentation " + split + " from " + t.where);
}

std::shared_ptr<Dataset> load_voc(const LayoutFiles& t, const std::string& split) {
  const std::string list = "ImageSets/Segmentation/" + split + ".txt";
  HPCNET_REQUIRE(t.has(list), "segmentation: " + t.where + " has no " + list +
                                  " (PASCAL VOC lists the images of each split there)");
  std::vector<Pair> pairs;
  std::istringstream in(t.text(list));
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    const std::string img = "JPEGImages/" + line + ".jpg", mask = "SegmentationClass/" + line + ".png";
    HPCNET_REQUIRE(t.has(img), "segmentation: " + t.where + list + ":" + std::to_string(line_no) +
                                   ": no " + img + t.why_missing(img));
    HPCNET_REQUIRE(t.has(mask), "segmentation: " + t.where + img + " has no mask (" + mask +
                                    t.why_missing(mask) + ")");
    pairs.push_back({img, mask});
  }
  HPCNET_REQUIRE(!pairs.empty(), "segmentation: " + t.where + list + " lists no image");
  return lazy_pairs(t, std::move(pairs), voc_class_names(), "voc " + split + " from " + t.where);
}

}  // namespace

namespace detail {
std::vector<std::string> data_yaml_class_names(const std::string& text, const std::string& file) {
  std::vector<std::string> names{"background"};
  try {
    YAML::Node y = YAML::Load(text);
    YAML::Node n = y["names"];
    if (n && n.IsSequence()) {
      for (const auto& v : n) names.push_back(v.as<std::string>());
    } else if (n && n.IsMap()) {
      std::map<int64_t, std::string> byid;
      for (const auto& kv : n) byid[kv.first.as<int64_t>()] = kv.second.as<std::string>();
      int64_t expect = 0;
      for (auto& [k, v] : byid) {
        HPCNET_REQUIRE(k == expect++,
                       "segmentation: " + file + ": names must be numbered 0, 1, ... ");
        names.push_back(v);
      }
    }
  } catch (const YAML::Exception& e) {
    throw InputError("segmentation: " + file + ": " + e.what());
  }
  HPCNET_REQUIRE(names.size() > 1, "segmentation: " + file + " has no names");
  return names;
}

bool segmentation_has_split(const std::string& path, const std::string& split) {
  if (is_yaml_file(path)) return segmentation_has_split(yaml_root(path).string(), split);
  std::error_code ec;
  auto is_split = [&](const std::vector<std::string>& parts, size_t skip) {
    if (parts.size() < skip + 2) return false;
    const std::string& top = parts[skip];
    return (top == "images" && parts[skip + 1] == split && parts.size() > skip + 2) ||
           (top == "ImageSets" && parts.size() == skip + 3 && parts[skip + 1] == "Segmentation" &&
            parts[skip + 2] == split + ".txt");
  };
  if (fs::is_regular_file(path, ec)) {
    if (!is_archive_name(path)) return false;
    bool found = false;
    const std::shared_ptr<const TarFile> tar = TarFile::open(decompressed_tar(path));
    for (const TarMember& m : tar->members()) {
      const std::vector<std::string> parts = split_path(m.path);
      for (size_t skip = 0; skip <= 2 && !found; ++skip) found = is_split(parts, skip);
    }
    return found;
  }
  for (const char* root : {"", "VOCdevkit/VOC2012/", "VOCdevkit/VOC2007/", "VOC2012/"}) {
    const fs::path r = fs::path(path) / root;
    if (fs::is_directory(r / "images" / split, ec) ||
        fs::exists(r / "ImageSets" / "Segmentation" / (split + ".txt"), ec))
      return true;
  }
  return false;
}
}  // namespace detail

std::shared_ptr<Dataset> load_segmentation(const std::string& path, const std::string& split) {
  HPCNET_REQUIRE(split == "train" || split == "val" || split == "test",
                 "segmentation: unknown split '" + split + "' (train, val or test)");
  LayoutFiles t = read_layout(path, split);
  bool generic = false, voc = false;
  for (const auto& kv : t.files) {
    generic = generic || kv.first.rfind("images/", 0) == 0;
    voc = voc || kv.first.rfind("JPEGImages/", 0) == 0;
  }
  for (const auto& kv : t.broken)  // images/<split>/ of nothing but dead links: say so
    generic = generic || kv.first.rfind("images/", 0) == 0;
  if (generic) return load_generic(t, split);
  if (voc) return load_voc(t, split);
  throw InputError("segmentation: " + path +
                   " holds neither images/<split>/ with masks/<split>/ nor a PASCAL VOC layout "
                   "(JPEGImages/, SegmentationClass/, ImageSets/Segmentation/)");
}

}  // namespace hpcnet::data
