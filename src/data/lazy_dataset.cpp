// LazyDataset: the index the loaders build (files and targets) and the decoding of one item on
// demand, on whichever thread asks (a DataLoader worker), into that thread's ExampleBuffer.
#include "src/data/lazy_dataset.h"

#include <cstring>
#include <filesystem>
#include <type_traits>

#include "src/data/tar_index.h"

namespace hpcnet::data::detail {
namespace {

// The index's bytes: u64 counts and sizes, length-prefixed strings, raw trivially copyable structs.
constexpr char kIndexMagic[8] = {'H', 'P', 'C', 'I', 'D', 'X', '1', '\0'};

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
template <class T>
void put_raw(std::string& out, const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  put_u64(out, v.size());
  if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

[[noreturn]] void malformed() {
  throw InputError("dataset index: malformed bytes (from another rank of a different build?)");
}
uint64_t get_u64(const uint8_t*& p, const uint8_t* end) {
  if (end - p < 8) malformed();
  uint64_t v;
  std::memcpy(&v, p, 8);
  p += 8;
  return v;
}
std::string get_str(const uint8_t*& p, const uint8_t* end) {
  const uint64_t n = get_u64(p, end);
  if (n > static_cast<uint64_t>(end - p)) malformed();
  std::string s(reinterpret_cast<const char*>(p), n);
  p += n;
  return s;
}
template <class T>
std::vector<T> get_raw(const uint8_t*& p, const uint8_t* end) {
  const uint64_t n = get_u64(p, end);
  if (n > static_cast<uint64_t>(end - p) / sizeof(T)) malformed();
  std::vector<T> v(n);
  if (n > 0) std::memcpy(v.data(), p, n * sizeof(T));  // v.data() may be null when empty
  p += n * sizeof(T);
  return v;
}
void put_ref(std::string& out, const FileRef& f) {
  put_str(out, f.path);
  put_u64(out, f.offset);
  put_u64(out, f.size);
  put_u64(out, f.archive);
}
FileRef get_ref(const uint8_t*& p, const uint8_t* end) {
  FileRef f;
  f.path = get_str(p, end);
  f.offset = get_u64(p, end);
  f.size = get_u64(p, end);
  f.archive = static_cast<uint32_t>(get_u64(p, end));
  return f;
}

}  // namespace

void FileStore::to_bytes(std::string& out) const {
  put_u64(out, tars_.size());
  for (size_t k = 0; k < tars_.size(); ++k) {
    put_str(out, tars_[k]->path());
    put_str(out, names_[k]);
  }
}

std::shared_ptr<const FileStore> FileStore::from_bytes(const uint8_t*& p, const uint8_t* end) {
  auto store = std::make_shared<FileStore>();
  const uint64_t n = get_u64(p, end);
  if (n > static_cast<uint64_t>(end - p) / 16) malformed();
  for (uint64_t k = 0; k < n; ++k) {
    const std::string path = get_str(p, end);
    store->add_archive(TarFile::open_unindexed(path), get_str(p, end));
  }
  return store;
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

std::vector<int64_t> LazyDataset::shard_starts() const {
  std::vector<int64_t> starts;
  if (what_ != "webdataset") return starts;
  for (size_t i = 0; i < items_.size(); ++i)
    if (i == 0 || items_[i].image.archive != items_[i - 1].image.archive)
      starts.push_back(static_cast<int64_t>(i));
  return starts;
}

int64_t LazyDataset::objects() const {
  return static_cast<int64_t>(rows_mode_ ? rows_.size() : boxes_.size());
}

std::string LazyDataset::to_bytes() const {
  std::string out(kIndexMagic, 8);
  store_->to_bytes(out);
  put_u64(out, static_cast<uint64_t>(kind_));
  put_str(out, what_);
  put_str(out, description_);
  put_u64(out, rows_mode_ ? 1 : 0);
  put_u64(out, classes_.size());
  for (const std::string& c : classes_) put_str(out, c);
  put_u64(out, items_.size());
  for (const LazyItem& it : items_) {
    put_ref(out, it.image);
    put_ref(out, it.mask);
    put_u64(out, static_cast<uint64_t>(it.label));
    put_u64(out, it.first);
    put_u64(out, it.count);
    put_u64(out, static_cast<uint32_t>(it.width));
    put_u64(out, static_cast<uint32_t>(it.height));
    put_str(out, it.name);
  }
  put_raw(out, rows_);
  put_raw(out, boxes_);
  return out;
}

std::shared_ptr<LazyDataset> LazyDataset::from_bytes(const std::string& bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* end = p + bytes.size();
  if (bytes.size() < 8 || std::memcmp(p, kIndexMagic, 8) != 0) malformed();
  p += 8;
  std::shared_ptr<const FileStore> store = FileStore::from_bytes(p, end);
  const uint64_t kind = get_u64(p, end);
  if (kind > static_cast<uint64_t>(TargetKind::kMask)) malformed();
  std::string what = get_str(p, end);
  std::string description = get_str(p, end);
  const bool rows_mode = get_u64(p, end) != 0;
  const uint64_t nc = get_u64(p, end);
  if (nc > static_cast<uint64_t>(end - p) / 8) malformed();
  std::vector<std::string> classes;
  for (uint64_t k = 0; k < nc; ++k) classes.push_back(get_str(p, end));
  auto ds = std::make_shared<LazyDataset>(std::move(store), std::move(classes),
                                          static_cast<TargetKind>(kind), std::move(what),
                                          std::move(description));
  const uint64_t n = get_u64(p, end);
  if (n > static_cast<uint64_t>(end - p) / 64) malformed();
  ds->items_.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    LazyItem it;
    it.image = get_ref(p, end);
    it.mask = get_ref(p, end);
    it.label = static_cast<int64_t>(get_u64(p, end));
    it.first = get_u64(p, end);
    it.count = get_u64(p, end);
    it.width = static_cast<int32_t>(get_u64(p, end));
    it.height = static_cast<int32_t>(get_u64(p, end));
    it.name = get_str(p, end);
    ds->items_.push_back(std::move(it));
  }
  ds->rows_ = get_raw<YoloRow>(p, end);
  ds->boxes_ = get_raw<Box>(p, end);
  ds->rows_mode_ = rows_mode;
  if (p != end) malformed();
  const uint64_t objects = rows_mode ? ds->rows_.size() : ds->boxes_.size();
  for (const LazyItem& it : ds->items_)
    if (it.first > objects || it.count > objects - it.first ||
        (ds->kind_ == TargetKind::kLabel &&
         (it.label < 0 || it.label >= static_cast<int64_t>(ds->classes_.size()))))
      malformed();
  return ds;
}

uint64_t LazyDataset::hash_objects(uint64_t h) const {
  for (const YoloRow& r : rows_) {
    const double v[5] = {static_cast<double>(r.cls), r.x1, r.y1, r.x2, r.y2};
    h = fnv1a(v, sizeof v, h);
  }
  for (const Box& b : boxes_) {
    const float v[7] = {static_cast<float>(b.cls), b.x1, b.y1, b.x2, b.y2, b.area,
                        b.crowd ? 1.f : 0.f};
    h = fnv1a(v, sizeof v, h);
  }
  return h;
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
  return hex64(hash_objects(h));
}

std::string LazyDataset::index_fingerprint() const {
  uint64_t h = fnv1a("lazy|" + std::to_string(static_cast<int>(kind_)) + "|" +
                     std::to_string(items_.size()) + "\n");
  for (const std::string& c : classes_) h = fnv1a(c + "\n", h);
  for (const LazyItem& it : items_)
    h = fnv1a(it.name + "|" + std::to_string(it.label) + "|" + std::to_string(it.count) + "\n", h);
  return hex64(hash_objects(h));
}

}  // namespace hpcnet::data::detail

namespace hpcnet::data {

std::string dataset_index_bytes(const Dataset& dataset) {
  const auto* lazy = dynamic_cast<const detail::LazyDataset*>(&dataset);
  return lazy ? lazy->to_bytes() : std::string();
}

std::shared_ptr<Dataset> dataset_from_index_bytes(const std::string& bytes) {
  return detail::LazyDataset::from_bytes(bytes);
}

}  // namespace hpcnet::data
