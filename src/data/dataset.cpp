// In-memory datasets, subsets, the fixed train/validation split and the dataset factory that
// recognises the CIFAR-10 binary layout, its archive, and image folders (unpacked or archived).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "hpcnet/rng.h"
#include "hpcnet/shards.h"
#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"

namespace fs = std::filesystem;

namespace hpcnet::data {

std::string Dataset::describe() const {
  std::string s =
      std::to_string(size()) + " images, " + std::to_string(classes().size()) + " classes";
  if (size() > 0) {
    ExampleBuffer buffer;
    Example e = get(0, buffer);
    s += ", first " + std::to_string(e.height) + "x" + std::to_string(e.width);
  }
  return s;
}

// ---- InMemoryDataset --------------------------------------------------------------------------

const char* target_kind_name(TargetKind k) {
  switch (k) {
    case TargetKind::kLabel: return "label";
    case TargetKind::kBoxes: return "boxes";
    case TargetKind::kMask: return "mask";
  }
  return "?";
}

InMemoryDataset::InMemoryDataset(std::vector<std::string> classes, std::string description,
                                 TargetKind kind)
    : classes_(std::move(classes)), description_(std::move(description)), kind_(kind) {}

void InMemoryDataset::reserve(int64_t images, int64_t pixels) {
  pixels_.reserve(static_cast<size_t>(pixels * 3));
  items_.reserve(static_cast<size_t>(images));
  names_.reserve(static_cast<size_t>(images));
}

void InMemoryDataset::check_kind(TargetKind kind, const std::string& name) const {
  HPCNET_REQUIRE(kind == kind_, "dataset: image " + (name.empty() ? "#" + std::to_string(items_.size()) : name) +
                                    ": adding a " + target_kind_name(kind) +
                                    " example to a dataset of " + target_kind_name(kind_) +
                                    " targets");
}

void InMemoryDataset::add_item(const uint8_t* hwc, int64_t height, int64_t width, int64_t label,
                               std::string name) {
  HPCNET_REQUIRE(height > 0 && width > 0 && height < (1 << 30) && width < (1 << 30),
                 "dataset: image " + (name.empty() ? "#" + std::to_string(items_.size()) : name) +
                     " has size " + std::to_string(height) + "x" + std::to_string(width));
  Item it{pixels_.size(), static_cast<int32_t>(height), static_cast<int32_t>(width), label};
  it.first_box = boxes_.size();
  it.mask_offset = masks_.size();
  pixels_.insert(pixels_.end(), hwc, hwc + height * width * 3);
  items_.push_back(it);
  names_.push_back(std::move(name));
}

void InMemoryDataset::add(const uint8_t* hwc, int64_t height, int64_t width, int64_t label,
                          std::string name) {
  check_kind(TargetKind::kLabel, name);
  HPCNET_REQUIRE(label >= 0 && label < static_cast<int64_t>(classes_.size()),
                 "dataset: label " + std::to_string(label) + " of image " +
                     (name.empty() ? "#" + std::to_string(items_.size()) : name) +
                     " is outside 0.." + std::to_string(static_cast<int64_t>(classes_.size()) - 1));
  add_item(hwc, height, width, label, std::move(name));
}

void InMemoryDataset::add_boxes(const uint8_t* hwc, int64_t height, int64_t width,
                                const std::vector<Box>& boxes, std::string name) {
  check_kind(TargetKind::kBoxes, name);
  const std::string who = name.empty() ? "#" + std::to_string(items_.size()) : name;
  detail::check_boxes(boxes.data(), boxes.size(), height, width, classes_.size(), who);
  add_item(hwc, height, width, 0, std::move(name));
  items_.back().num_boxes = boxes.size();
  boxes_.insert(boxes_.end(), boxes.begin(), boxes.end());
}

void InMemoryDataset::add_mask(const uint8_t* hwc, int64_t height, int64_t width,
                               const uint8_t* mask, std::string name) {
  check_kind(TargetKind::kMask, name);
  const int64_t n = height * width;
  detail::check_mask(mask, height, width, classes_.size(),
                     name.empty() ? "#" + std::to_string(items_.size()) : name);
  add_item(hwc, height, width, 0, std::move(name));
  masks_.insert(masks_.end(), mask, mask + n);
}

Example InMemoryDataset::get(int64_t i) const {
  HPCNET_CHECK(i >= 0 && i < size(), "dataset index " + std::to_string(i) + " out of range (size " +
                                         std::to_string(size()) + ")");
  const Item& it = items_[static_cast<size_t>(i)];
  Example ex{pixels_.data() + it.offset, it.height, it.width, it.label};
  if (kind_ == TargetKind::kBoxes) {
    ex.boxes = boxes_.data() + it.first_box;
    ex.num_boxes = static_cast<int64_t>(it.num_boxes);
  } else if (kind_ == TargetKind::kMask) {
    ex.mask = masks_.data() + it.mask_offset;
  }
  return ex;
}

std::string InMemoryDataset::item_name(int64_t i) const {
  HPCNET_CHECK(i >= 0 && i < size(), "dataset index out of range");
  const std::string& n = names_[static_cast<size_t>(i)];
  return n.empty() ? "#" + std::to_string(i) : n;
}

std::string InMemoryDataset::describe() const { return description_ + ": " + Dataset::describe(); }

std::vector<int64_t> InMemoryDataset::class_counts() const {
  std::vector<int64_t> counts(classes_.size(), 0);
  for (const Item& it : items_) counts[static_cast<size_t>(it.label)]++;
  return counts;
}

// ---- Subset -----------------------------------------------------------------------------------

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  HPCNET_CHECK(base_ != nullptr, "Subset of a null dataset");
  const int64_t n = base_->size();
  for (int64_t idx : indices_)
    HPCNET_REQUIRE(idx >= 0 && idx < n, "subset: index " + std::to_string(idx) +
                                            " is outside a dataset of " + std::to_string(n) +
                                            " items");
}

Example Subset::get(int64_t i, ExampleBuffer& buffer) const {
  HPCNET_CHECK(i >= 0 && i < size(), "subset index out of range");
  return base_->get(indices_[static_cast<size_t>(i)], buffer);
}

std::string Subset::item_name(int64_t i) const {
  HPCNET_CHECK(i >= 0 && i < size(), "subset index out of range");
  return base_->item_name(indices_[static_cast<size_t>(i)]);
}

// ---- what a dataset holds -----------------------------------------------------------------------

std::string index_fingerprint(const Dataset& ds) {
  if (const auto* lazy = dynamic_cast<const detail::LazyDataset*>(&ds))
    return lazy->index_fingerprint();
  // In memory (CIFAR-10's batches, tests' datasets): names and targets from the items themselves;
  // another dataset (a Subset of a lazy one): names only, nothing is decoded.
  uint64_t h = detail::fnv1a("items|" + std::to_string(static_cast<int>(ds.target_kind())) + "|" +
                             std::to_string(ds.size()) + "\n");
  for (const std::string& c : ds.classes()) h = detail::fnv1a(c + "\n", h);
  ExampleBuffer buffer;
  for (int64_t i = 0; i < ds.size(); ++i) {
    std::string line = ds.item_name(i);
    if (ds.in_memory()) {
      const Example ex = ds.get(i, buffer);
      line += "|" + std::to_string(ex.label) + "|" + std::to_string(ex.height) + "x" +
              std::to_string(ex.width) + "|" + std::to_string(ex.num_boxes);
      for (int64_t k = 0; k < ex.num_boxes; ++k) {
        const Box& b = ex.boxes[k];
        const float v[5] = {static_cast<float>(b.cls), b.x1, b.y1, b.x2, b.y2};
        h = detail::fnv1a(v, sizeof v, h);
      }
    }
    h = detail::fnv1a(line + "\n", h);
  }
  return detail::hex64(h);
}

bool placeholder_class_names(const std::vector<std::string>& names) {
  if (names.empty()) return false;
  for (size_t k = 0; k < names.size(); ++k)
    if (names[k] != "class_" + std::to_string(k)) return false;
  return true;
}

// ---- validation split -------------------------------------------------------------------------

TrainValSplit split_train_val(int64_t n_total, int64_t n_val) {
  HPCNET_REQUIRE(n_val >= 0 && n_val < n_total,
                 "validation split: " + std::to_string(n_val) +
                     " validation images requested from " + std::to_string(n_total) +
                     "; use a number from 0 to " +
                     std::to_string(std::max<int64_t>(n_total - 1, 0)));
  Rng rng(kValSplitSeed, 0);
  std::vector<int64_t> perm = random_permutation(n_total, rng);
  TrainValSplit s;
  s.train.assign(perm.begin(), perm.end() - n_val);
  s.val.assign(perm.end() - n_val, perm.end());
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.val.begin(), s.val.end());
  return s;
}

// ---- factory ----------------------------------------------------------------------------------

namespace detail {

void check_split(const std::string& split, const std::string& what) {
  HPCNET_REQUIRE(split == "train" || split == "test",
                 what + ": unknown split '" + split + "'; use train or test");
}

}  // namespace detail

namespace {

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool looks_like_batches_dir(const fs::path& p) {
  return is_file(p / "data_batch_1.bin") || is_file(p / "test_batch.bin");
}

// A .tar/.tar.gz given as "cifar10": the binary layout (read in memory, 150 MB at most) or an
// image folder (read lazily from the tar), told by its entries (one pass over the archive).
std::shared_ptr<Dataset> open_cifar10_archive(const std::string& path, const std::string& split) {
  bool any_binary = false;
  auto want = [&](const std::string& p, bool is_directory) {
    std::string base;
    const bool binary = !is_directory && detail::cifar10_archive_member(p, split, &base);
    any_binary = any_binary || binary;
    return binary;
  };
  std::vector<detail::ArchiveEntry> entries = detail::scan_archive(path, want);
  if (any_binary) return detail::cifar10_from_archive_entries(path, split, entries);
  return load_image_folder(path, split);
}

std::shared_ptr<Dataset> open_cifar10(const std::string& path, const std::string& split) {
  detail::check_split(split, "cifar10");
  const std::string where_hint =
      "; download " + std::string(kCifar10Url) +
      " there (cifar-10-binary.tar.gz or unpacked cifar-10-batches-bin/) or pass an image "
      "folder with train/<class>/ images";
  fs::path p(path);
  std::error_code ec;
  if (!fs::exists(p, ec)) throw InputError("cifar10: " + path + " does not exist" + where_hint);
  if (is_file(p)) {
    HPCNET_REQUIRE(detail::is_archive_name(path),
                   "cifar10: " + path +
                       " is a file but not a .tar/.tar.gz/.tgz archive; pass "
                       "cifar-10-binary.tar.gz, a folder holding cifar-10-batches-bin/, or an "
                       "image folder");
    return open_cifar10_archive(path, split);
  }
  if (looks_like_batches_dir(p)) return load_cifar10_binary(path, split);
  if (is_dir(p / "cifar-10-batches-bin")) return load_cifar10_binary(path, split);
  if (is_file(p / kCifar10Archive)) return load_cifar10_binary(path, split);
  if (is_dir(p / "train") || is_dir(p / "test")) return load_image_folder(path, split);
  throw InputError("cifar10: " + path +
                   " holds neither cifar-10-batches-bin/, cifar-10-binary.tar.gz, "
                   "data_batch_*.bin nor train/ or test/ folders" +
                   where_hint);
}

}  // namespace

const std::vector<std::string>& dataset_formats() {
  static const std::vector<std::string> names = {"cifar10", "imagefolder", "segmentation",
                                                 "voc",     "detect",      "webdataset"};
  return names;
}

std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& path,
                                      const std::string& split) {
  // WebDataset shards are known by their form whatever the name (see is_webdataset_path).
  if (name == "webdataset" || is_webdataset_path(path)) return load_webdataset(path);
  if (name == "cifar10") return open_cifar10(path, split);
  if (name == "imagefolder") return load_image_folder(path, split);
  if (name == "segmentation" || name == "voc") return load_segmentation(path, split);
  if (name == "detect") {
    DetectionData d = load_detection_dataset(path, split);
    for (const std::string& line : d.report.lines()) std::fprintf(stderr, "%s\n", line.c_str());
    return d.dataset;
  }
  std::string known;
  for (const std::string& n : dataset_formats()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown dataset '" + name + "'; use one of " + known);
}

bool has_split(const std::string& name, const std::string& path, const std::string& split) {
  if (name == "webdataset" || is_webdataset_path(path)) return false;  // the shards are the split
  if (name == "detect") return detection_has_split(path, split);
  if (name != "segmentation" && name != "voc") return false;
  return detail::segmentation_has_split(path, split);
}

}  // namespace hpcnet::data
