// LazyDataset: the index the loaders build (files and targets) and the decoding of one item on
// demand, on whichever thread asks (a DataLoader worker), into that thread's ExampleBuffer.
#include "src/data/lazy_dataset.h"

#include <sys/stat.h>

#include <filesystem>

#include "src/data/tar_index.h"

namespace hpcnet::data::detail {

uint32_t FileStore::add_archive(std::shared_ptr<const TarFile> tar, std::string name) {
  HPCNET_CHECK(tar != nullptr, "FileStore: a null archive");
  tars_.push_back(std::move(tar));
  names_.push_back(std::move(name));
  return static_cast<uint32_t>(tars_.size() - 1);
}

void FileStore::read(const FileRef& f, std::vector<uint8_t>& out, const std::string& what) const {
  if (tars_.empty()) return read_file_into(f.path, what, out);
  HPCNET_CHECK(f.archive < tars_.size(), "FileRef of an archive the store does not hold");
  tars_[f.archive]->read_into(TarMember{f.path, f.offset, f.size}, out);
}

std::string FileStore::display(const FileRef& f) const {
  if (tars_.empty() || f.archive >= names_.size()) return f.path;
  return names_[f.archive] + ":" + f.path;
}

std::string FileStore::identity() const {
  std::string id;
  for (const auto& tar : tars_) {
    struct stat st {};
    ::stat(tar->path().c_str(), &st);
    id += tar->path() + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtime) + ";";
  }
  return id;
}

void check_boxes(const Box* boxes, size_t n, int64_t height, int64_t width, size_t classes,
                 const std::string& who) {
  for (size_t k = 0; k < n; ++k) {
    const Box& b = boxes[k];
    HPCNET_REQUIRE(b.cls >= 0 && b.cls < static_cast<int64_t>(classes),
                   "dataset: image " + who + " box " + std::to_string(k) + " has class " +
                       std::to_string(b.cls) + ", outside 0.." +
                       std::to_string(static_cast<int64_t>(classes) - 1));
    HPCNET_REQUIRE(b.x1 >= 0 && b.y1 >= 0 && b.x1 <= b.x2 && b.y1 <= b.y2 &&
                       b.x2 <= static_cast<float>(width) && b.y2 <= static_cast<float>(height),
                   "dataset: image " + who + " box " + std::to_string(k) +
                       " is not inside the image (" + std::to_string(width) + "x" +
                       std::to_string(height) + ")");
  }
}

void check_mask(const uint8_t* mask, int64_t height, int64_t width, size_t classes,
                const std::string& who) {
  const int64_t n = height * width;
  for (int64_t p = 0; p < n; ++p)
    HPCNET_REQUIRE(mask[p] < classes || mask[p] == kIgnoreIndex,
                   "dataset: mask of image " + who + " has class " + std::to_string(mask[p]) +
                       " at pixel (" + std::to_string(p / width) + ", " +
                       std::to_string(p % width) + "), outside 0.." +
                       std::to_string(static_cast<int64_t>(classes) - 1) + " and not " +
                       std::to_string(kIgnoreIndex) + " (ignore)");
}

LazyDataset::LazyDataset(std::shared_ptr<const FileStore> store, std::vector<std::string> classes,
                         TargetKind kind, std::string what, std::string description)
    : store_(std::move(store)),
      classes_(std::move(classes)),
      kind_(kind),
      what_(std::move(what)),
      description_(std::move(description)) {
  HPCNET_CHECK(store_ != nullptr, "LazyDataset of a null store");
}

void LazyDataset::add(LazyItem item) {
  HPCNET_CHECK(kind_ != TargetKind::kBoxes, "LazyDataset::add on a boxes dataset");
  HPCNET_CHECK(kind_ != TargetKind::kMask || !item.mask.empty(), "mask item without a mask");
  HPCNET_REQUIRE(item.label >= 0 && item.label < static_cast<int64_t>(classes_.size()),
                 "dataset: label " + std::to_string(item.label) + " of image " + item.name +
                     " is outside 0.." + std::to_string(static_cast<int64_t>(classes_.size()) - 1));
  items_.push_back(std::move(item));
}

void LazyDataset::add_rows(LazyItem item, const std::vector<YoloRow>& rows) {
  HPCNET_CHECK(kind_ == TargetKind::kBoxes && boxes_.empty(),
               "LazyDataset::add_rows mixed with add_boxes");
  rows_mode_ = true;
  item.first = rows_.size();
  item.count = rows.size();
  rows_.insert(rows_.end(), rows.begin(), rows.end());
  items_.push_back(std::move(item));
}

void LazyDataset::add_boxes(LazyItem item, const std::vector<Box>& boxes) {
  HPCNET_CHECK(kind_ == TargetKind::kBoxes && !rows_mode_,
               "LazyDataset::add_boxes mixed with add_rows");
  check_boxes(boxes.data(), boxes.size(), item.height, item.width, classes_.size(), item.name);
  item.first = boxes_.size();
  item.count = boxes.size();
  boxes_.insert(boxes_.end(), boxes.begin(), boxes.end());
  items_.push_back(std::move(item));
}

Example LazyDataset::get(int64_t i, ExampleBuffer& b) const {
  HPCNET_CHECK(i >= 0 && i < size(), "dataset index " + std::to_string(i) + " out of range (size " +
                                         std::to_string(size()) + ")");
  const LazyItem& it = items_[static_cast<size_t>(i)];
  // One decoder per thread: it keeps its error manager between images (each image still gets a
  // fresh decompressor, see ImageDecoder).
  thread_local ImageDecoder decoder;
  store_->read(it.image, b.file, what_);
  const std::string e = decoder.decode(b.file.data(), b.file.size(), b.image, decode_min_side_);
  if (!e.empty())
    throw InputError(what_ + ": cannot decode image " + store_->display(it.image) + ": " + e +
                     "; replace or remove the file");
  Example ex;
  ex.pixels = b.image.pixels.data();
  ex.height = b.image.height;
  ex.width = b.image.width;
  const uint8_t* mask = nullptr;
  if (kind_ == TargetKind::kMask) {
    read_mask(i, ex.height, ex.width, b);
    mask = b.mask.data();
  }
  fill_target(i, ex.height, ex.width, mask, b, ex);
  return ex;
}

void LazyDataset::read_mask(int64_t i, int64_t height, int64_t width, ExampleBuffer& b) const {
  const LazyItem& it = items_[static_cast<size_t>(i)];
  thread_local ImageDecoder decoder;
  store_->read(it.mask, b.mask_file, what_);
  int64_t mh = 0, mw = 0;
  const std::string e =
      decoder.decode_mask(b.mask_file.data(), b.mask_file.size(), b.mask, &mh, &mw);
  if (!e.empty())
    throw InputError(what_ + ": cannot decode " + store_->display(it.mask) + ": " + e +
                     "; replace or remove the file");
  HPCNET_REQUIRE(mh == height && mw == width,
                 what_ + ": " + store_->display(it.mask) + " is " + std::to_string(mw) + "x" +
                     std::to_string(mh) + " but its image " + it.name + " is " +
                     std::to_string(width) + "x" + std::to_string(height) +
                     "; masks must have their image's size");
}

void LazyDataset::fill_target(int64_t i, int64_t height, int64_t width, const uint8_t* mask,
                              ExampleBuffer& b, Example& ex) const {
  const LazyItem& it = items_[static_cast<size_t>(i)];
  ex.label = kind_ == TargetKind::kLabel ? it.label : 0;
  if (kind_ == TargetKind::kBoxes) {
    b.boxes.clear();
    if (rows_mode_) {
      const double w = static_cast<double>(width), h = static_cast<double>(height);
      for (uint64_t k = it.first; k < it.first + it.count; ++k) {  // as yolo_rows_to_boxes
        const YoloRow& r = rows_[k];
        b.boxes.push_back({r.cls, static_cast<float>(r.x1 * w), static_cast<float>(r.y1 * h),
                           static_cast<float>(r.x2 * w), static_cast<float>(r.y2 * h)});
      }
    } else {
      HPCNET_REQUIRE(it.width == 0 || (it.width == width && it.height == height),
                     what_ + ": image " + it.name + " is " + std::to_string(it.width) + "x" +
                         std::to_string(it.height) + " in the JSON but " +
                         store_->display(it.image) + " decodes to " + std::to_string(width) + "x" +
                         std::to_string(height) + "; fix width/height or the file");
      b.boxes.assign(boxes_.begin() + static_cast<std::ptrdiff_t>(it.first),
                     boxes_.begin() + static_cast<std::ptrdiff_t>(it.first + it.count));
    }
    check_boxes(b.boxes.data(), b.boxes.size(), height, width, classes_.size(), it.name);
    ex.boxes = b.boxes.data();
    ex.num_boxes = static_cast<int64_t>(b.boxes.size());
  }
  if (kind_ == TargetKind::kMask) {
    HPCNET_CHECK(mask != nullptr, "mask dataset item without its mask");
    try {
      check_mask(mask, height, width, classes_.size(), it.name);
    } catch (const InputError& e) {
      throw InputError(what_ + ": " + store_->display(it.mask) + ": " + e.what());
    }
    ex.mask = mask;
  }
}

void LazyDataset::set_decode_min_side(int64_t min_side) {
  // Boxes and masks are in the full image's pixels: only class labels allow a reduced decode.
  decode_min_side_ = kind_ == TargetKind::kLabel ? std::max<int64_t>(0, min_side) : 0;
}

std::string LazyDataset::item_name(int64_t i) const {
  HPCNET_CHECK(i >= 0 && i < size(), "dataset index out of range");
  return items_[static_cast<size_t>(i)].name;
}

const LazyItem& LazyDataset::item(int64_t i) const {
  HPCNET_CHECK(i >= 0 && i < size(), "dataset index out of range");
  return items_[static_cast<size_t>(i)];
}

std::vector<YoloRow> LazyDataset::rows_of(int64_t i) const {
  const LazyItem& it = item(i);
  if (kind_ != TargetKind::kBoxes || !rows_mode_) return {};
  return {rows_.begin() + static_cast<std::ptrdiff_t>(it.first),
          rows_.begin() + static_cast<std::ptrdiff_t>(it.first + it.count)};
}

std::vector<Box> LazyDataset::boxes_of(int64_t i) const {
  const LazyItem& it = item(i);
  if (kind_ != TargetKind::kBoxes || rows_mode_) return {};
  return {boxes_.begin() + static_cast<std::ptrdiff_t>(it.first),
          boxes_.begin() + static_cast<std::ptrdiff_t>(it.first + it.count)};
}

std::string LazyDataset::describe() const {
  // No image is decoded for a description: the index says what there is.
  return description_ + ": " + std::to_string(size()) + " images, " +
         std::to_string(classes_.size()) + " classes, decoded when read";
}

int64_t LazyDataset::objects() const {
  return static_cast<int64_t>(rows_mode_ ? rows_.size() : boxes_.size());
}

std::string LazyDataset::fingerprint() const {
  uint64_t h = fnv1a(store_->identity());
  // What the decoder makes of the same bytes: a --cache disk file written by a decoder that did
  // not apply EXIF orientations holds other pixels, and must not be reused.
  h = fnv1a(std::string("decoder 2: EXIF orientation applied\n"), h);  // not (void*, size)
  h = fnv1a(description_, h);
  h = fnv1a(std::to_string(static_cast<int>(kind_)) + "|" + std::to_string(decode_min_side_), h);
  for (const std::string& c : classes_) h = fnv1a(c + "\n", h);
  for (const LazyItem& it : items_) {
    h = fnv1a(it.image.path + "|" + it.mask.path + "|" + std::to_string(it.image.archive) + "|" +
                  std::to_string(it.image.offset) + "|" + std::to_string(it.image.size) + "|" +
                  std::to_string(it.label) + "\n",
              h);
  }
  for (const YoloRow& r : rows_) {
    const double v[5] = {static_cast<double>(r.cls), r.x1, r.y1, r.x2, r.y2};
    h = fnv1a(v, sizeof v, h);
  }
  for (const Box& b : boxes_) {
    const float v[7] = {static_cast<float>(b.cls), b.x1, b.y1, b.x2, b.y2, b.area,
                        b.crowd ? 1.f : 0.f};
    h = fnv1a(v, sizeof v, h);
  }
  return hex64(h);
}

}  // namespace hpcnet::data::detail
