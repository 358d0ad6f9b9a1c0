// Segmentation datasets: image and class-mask pairs in the two layouts users hold, from a folder
// or a .tar/.tar.gz read in memory (an optional single top-level folder, e.g. VOCdevkit/VOC2012/,
// is looked through). Files are read first, then decoded on all cores; the dataset is sorted by
// image name whatever the thread count.
//   generic  images/<split>/NAME.{jpg,jpeg,png} + masks/<split>/NAME.png; class names from
//            classes.txt (one per line, line k = mask value k) or, beside an Ultralytics
//            data.yaml, "background" followed by its names (mask value 1 + k = class k).
//   VOC      JPEGImages/NAME.jpg, SegmentationClass/NAME.png (palette index = class),
//            ImageSets/Segmentation/<split>.txt; the 21 PASCAL VOC classes.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "src/data/internal.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

const std::vector<std::string>& voc_class_names() {
  static const std::vector<std::string> names = {
      "background", "aeroplane", "bicycle", "bird",  "boat",        "bottle", "bus",
      "car",        "cat",       "chair",   "cow",   "diningtable", "dog",    "horse",
      "motorbike",  "person",    "pottedplant", "sheep", "sofa",    "train",  "tvmonitor"};
  return names;
}

// The files of a dataset root that a layout may use, by path relative to the root. From an
// archive they are in memory; from a folder they are read when first asked for (a VOC folder
// holds far more images than its segmentation lists name).
struct FileTree {
  std::string where;  // the folder or archive, for messages
  fs::path root;      // the folder; empty for an archive
  std::map<std::string, std::vector<uint8_t>> files;
  bool has(const std::string& p) const { return files.count(p) != 0; }
  const std::vector<uint8_t>& get(const std::string& p) {
    std::vector<uint8_t>& b = files.at(p);
    if (b.empty() && !root.empty()) b = detail::read_whole_file((root / p).string(), "segmentation");
    return b;
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

FileTree read_tree(const std::string& path, const std::string& split) {
  FileTree t;
  t.where = path;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    HPCNET_REQUIRE(detail::is_archive_name(path),
                   "segmentation: " + path + " is a file but not a .tar/.tar.gz/.tgz archive");
    // Keep everything a layout may use, at the top or below one top-level folder (or two, as
    // VOCdevkit/VOC2012/); decide the prefix afterwards.
    auto want = [&](const std::string& p, bool is_dir) {
      if (is_dir) return false;
      std::vector<std::string> parts = detail::split_path(p);
      for (size_t skip = 0; skip <= 2 && skip < parts.size(); ++skip)
        if (wanted(std::vector<std::string>(parts.begin() + skip, parts.end()), split)) return true;
      return false;
    };
    std::vector<detail::ArchiveEntry> entries = detail::scan_archive(path, want);
    std::map<std::string, int> prefixes;  // candidate roots, by the entries below them
    for (const auto& e : entries) {
      std::vector<std::string> parts = detail::split_path(e.path);
      std::string prefix;
      for (size_t skip = 0; skip <= 2 && skip < parts.size(); ++skip) {
        if (wanted(std::vector<std::string>(parts.begin() + skip, parts.end()), split)) {
          prefixes[prefix]++;
          break;
        }
        prefix += parts[skip] + "/";
      }
    }
    HPCNET_REQUIRE(!prefixes.empty(), "segmentation: archive " + path +
                                          " holds no images/ and masks/ folders nor a VOC "
                                          "layout (JPEGImages/, SegmentationClass/)");
    const std::string prefix =
        std::max_element(prefixes.begin(), prefixes.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; })
            ->first;
    for (auto& e : entries)
      if (e.path.compare(0, prefix.size(), prefix) == 0)
        t.files.emplace(e.path.substr(prefix.size()), std::move(e.data));
    t.where = path + ":" + prefix;
    return t;
  }
  HPCNET_REQUIRE(fs::is_directory(path, ec), "segmentation: " + path + " does not exist");
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
    if (it->is_regular_file(fec) && wanted(parts, split)) t.files.emplace(rel.generic_string(), std::vector<uint8_t>{});
  }
  HPCNET_REQUIRE(!ec, "segmentation: cannot list " + root.string() + ": " + ec.message());
  t.root = root;
  t.where = root.string() + "/";
  return t;
}

std::string text_of(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

std::string stem(const std::string& file) {
  const size_t dot = file.rfind('.');
  return dot == std::string::npos ? file : file.substr(0, dot);
}

std::vector<std::string> class_names_generic(FileTree& t) {
  // Mask values are bytes and 255 means "ignore": at most 255 classes.
  auto check_count = [&](const std::vector<std::string>& names, const char* file) {
    HPCNET_REQUIRE(names.size() <= 255, "segmentation: " + t.where + file + " names " +
                                            std::to_string(names.size()) +
                                            " classes; 8-bit masks hold at most 255 (value 255 "
                                            "= ignore)");
  };
  if (t.has("classes.txt")) {
    std::vector<std::string> names;
    std::istringstream in(text_of(t.get("classes.txt")));
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
        detail::data_yaml_class_names(text_of(t.get("data.yaml")), t.where + "data.yaml");
    check_count(names, "data.yaml");
    return names;
  }
  throw InputError("segmentation: " + t.where +
                   " has no classes.txt (one class name per line; line k names mask value k) "
                   "and no data.yaml with names; add one");
}

struct Pair {
  std::string name;                  // item_name(): "images/val/000001.jpg"
  const std::vector<uint8_t>* image;
  const std::vector<uint8_t>* mask;
  std::string mask_name;
};

std::shared_ptr<InMemoryDataset> decode_pairs(std::vector<Pair> pairs,
                                              std::vector<std::string> classes,
                                              const std::string& where, std::string description) {
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.name < b.name; });
  const size_t n = pairs.size();
  struct Decoded {
    Image image;
    std::vector<uint8_t> mask;
    int64_t mh = 0, mw = 0;
  };
  std::vector<Decoded> out(n);
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t err_index = n;
  std::string err_text;
  auto work = [&] {
    detail::ImageDecoder dec;
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      std::string e = dec.decode(pairs[i].image->data(), pairs[i].image->size(), out[i].image);
      std::string who = pairs[i].name;
      if (e.empty()) {
        e = dec.decode_mask(pairs[i].mask->data(), pairs[i].mask->size(), out[i].mask, &out[i].mh,
                            &out[i].mw);
        who = pairs[i].mask_name;
      }
      if (!e.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < err_index) {
          err_index = i;
          err_text = "cannot decode " + where + who + ": " + e;
        }
      }
    }
  };
  const size_t threads =
      std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 16, n / 64 + 1});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (err_index < n) throw InputError("segmentation: " + err_text + "; replace or remove the file");
  auto ds = std::make_shared<InMemoryDataset>(std::move(classes), std::move(description),
                                              TargetKind::kMask);
  int64_t pixels = 0;
  for (const Decoded& d : out) pixels += d.image.height * d.image.width;
  ds->reserve(static_cast<int64_t>(n), pixels);
  for (size_t i = 0; i < n; ++i) {
    Decoded& d = out[i];
    HPCNET_REQUIRE(d.mh == d.image.height && d.mw == d.image.width,
                   "segmentation: " + where + pairs[i].mask_name + " is " + std::to_string(d.mw) +
                       "x" + std::to_string(d.mh) + " but its image " + pairs[i].name + " is " +
                       std::to_string(d.image.width) + "x" + std::to_string(d.image.height) +
                       "; masks must have their image's size");
    try {
      ds->add_mask(d.image.pixels.data(), d.image.height, d.image.width, d.mask.data(),
                   pairs[i].name);
    } catch (const InputError& e) {
      throw InputError("segmentation: " + where + pairs[i].mask_name + ": " + e.what());
    }
    d = Decoded{};  // free as we go: peak memory is the dataset plus the undecoded files
  }
  return ds;
}

std::shared_ptr<InMemoryDataset> load_generic(FileTree& t, const std::string& split) {
  const std::string img_dir = "images/" + split + "/", mask_dir = "masks/" + split + "/";
  std::map<std::string, const std::pair<const std::string, std::vector<uint8_t>>*> masks;
  for (const auto& kv : t.files)
    if (kv.first.compare(0, mask_dir.size(), mask_dir) == 0 &&
        kv.first.find('/', mask_dir.size()) == std::string::npos)
      masks[stem(kv.first.substr(mask_dir.size()))] = &kv;
  std::vector<Pair> pairs;
  for (auto& kv : t.files) {
    if (kv.first.compare(0, img_dir.size(), img_dir) != 0) continue;
    const std::string file = kv.first.substr(img_dir.size());
    if (file.find('/') != std::string::npos || !detail::is_image_name(file)) continue;
    auto m = masks.find(stem(file));
    HPCNET_REQUIRE(m != masks.end(), "segmentation: " + t.where + kv.first + " has no mask (" +
                                         mask_dir + stem(file) + ".png); add it or remove the image");
    pairs.push_back({kv.first, &t.get(kv.first), &t.get(m->second->first), m->second->first});
  }
  HPCNET_REQUIRE(!pairs.empty(), "segmentation: " + t.where + " has no images in " + img_dir +
                                     " (expected " + img_dir + "NAME.jpg with " + mask_dir +
                                     "NAME.png)");
  return decode_pairs(std::move(pairs), class_names_generic(t), t.where,
                      "segmentation " + split + " from " + t.where);
}

std::shared_ptr<InMemoryDataset> load_voc(FileTree& t, const std::string& split) {
  const std::string list = "ImageSets/Segmentation/" + split + ".txt";
  HPCNET_REQUIRE(t.has(list), "segmentation: " + t.where + " has no " + list +
                                  " (PASCAL VOC lists the images of each split there)");
  std::vector<Pair> pairs;
  std::istringstream in(text_of(t.get(list)));
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    const std::string img = "JPEGImages/" + line + ".jpg", mask = "SegmentationClass/" + line + ".png";
    HPCNET_REQUIRE(t.has(img), "segmentation: " + t.where + list + ":" + std::to_string(line_no) +
                                   ": no " + img);
    HPCNET_REQUIRE(t.has(mask), "segmentation: " + t.where + img + " has no mask (" + mask + ")");
    pairs.push_back({img, &t.get(img), &t.get(mask), mask});
  }
  HPCNET_REQUIRE(!pairs.empty(), "segmentation: " + t.where + list + " lists no image");
  return decode_pairs(std::move(pairs), voc_class_names(), t.where,
                      "voc " + split + " from " + t.where);
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
    scan_archive(path, [&](const std::string& p, bool is_dir) {
      const std::vector<std::string> parts = split_path(p);
      for (size_t skip = 0; skip <= 2 && !found; ++skip) found = is_split(parts, skip);
      return false;  // names only
    });
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

std::shared_ptr<InMemoryDataset> load_segmentation(const std::string& path,
                                                   const std::string& split) {
  HPCNET_REQUIRE(split == "train" || split == "val" || split == "test",
                 "segmentation: unknown split '" + split + "' (train, val or test)");
  FileTree t = read_tree(path, split);
  bool generic = false, voc = false;
  for (const auto& kv : t.files) {
    generic = generic || kv.first.rfind("images/", 0) == 0;
    voc = voc || kv.first.rfind("JPEGImages/", 0) == 0;
  }
  if (generic) return load_generic(t, split);
  if (voc) return load_voc(t, split);
  throw InputError("segmentation: " + path +
                   " holds neither images/<split>/ with masks/<split>/ nor a PASCAL VOC layout "
                   "(JPEGImages/, SegmentationClass/, ImageSets/Segmentation/)");
}

}  // namespace hpcnet::data
