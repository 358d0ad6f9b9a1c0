// Lazy datasets: an index of where each item's files lie (paths in a folder, or members of an
// archive read by offset) and what its target is; get() reads and decodes one item into the
// caller's ExampleBuffer. Memory holds the index only, O(files), never O(pixels).
// Invariant: an item decodes to the same Example as the eager loaders produced (same pixels, the
// same boxes to the bit), so --cache none, ram and disk train to identical weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/file_tree.h"
#include "src/data/internal.h"

namespace hpcnet::data::detail {

struct LazyItem {
  FileRef image;
  FileRef mask;        // kMask
  int64_t label = 0;   // kLabel
  uint64_t first = 0;  // kBoxes: its rows (yolo) or boxes (coco) start here ...
  uint64_t count = 0;  //   and number this many
  int32_t width = 0;   // coco: the JSON's size (0: not checked)
  int32_t height = 0;
  std::string name;  // item_name()
};

class LazyDataset : public Dataset {
 public:
  // what: the loader's name in messages ("imagefolder", "detect", "segmentation").
  LazyDataset(std::shared_ptr<const FileStore> store, std::vector<std::string> classes,
              TargetKind kind, std::string what, std::string description);
  // Items in dataset order. add_rows: a yolo image's label rows (boxes in pixels of whatever the
  // image decodes to); add_boxes: boxes in pixels of an image of item.width x item.height.
  void add(LazyItem item);
  void add_rows(LazyItem item, const std::vector<YoloRow>& rows);
  void add_boxes(LazyItem item, const std::vector<Box>& boxes);
  void reserve(size_t items) { items_.reserve(items); }
  // See data::set_decode_min_side (a no-op for boxes and masks).
  void set_decode_min_side(int64_t min_side);

  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  Example get(int64_t i, ExampleBuffer& buffer) const override;
  const std::vector<std::string>& classes() const override { return classes_; }
  TargetKind target_kind() const override { return kind_; }
  std::string item_name(int64_t i) const override;
  std::string describe() const override;
  // Shards (the loader "webdataset"): where each archive's items start; else empty.
  std::vector<int64_t> shard_starts() const override;

  // Item i's target for its image decoded elsewhere (a cache), of height x width: ex gets label,
  // boxes (into buffer.boxes) and, when mask is not null, the mask checked against the classes.
  void fill_target(int64_t i, int64_t height, int64_t width, const uint8_t* mask,
                   ExampleBuffer& buffer, Example& ex) const;
  // Item i's mask decoded into buffer.mask (kMask), checked to be height x width.
  void read_mask(int64_t i, int64_t height, int64_t width, ExampleBuffer& buffer) const;
  // Boxes (or label rows) in the index.
  int64_t objects() const;
  // The whole index as bytes (store, classes, items, targets; not decode_min_side), for one rank
  // to walk a folder or read a JSON and send the result to the others; from_bytes rebuilds the
  // dataset without reading any file of it (archives are opened, not indexed again). The bytes
  // are meant for the same build on the same job (raw structs); InputError for malformed bytes.
  std::string to_bytes() const;
  static std::shared_ptr<LazyDataset> from_bytes(const std::string& bytes);
  // A digest of the index (store, names, files, targets) that changes when the data does.
  std::string fingerprint() const;
  // data::index_fingerprint: classes, kind, and each item's name and target, without the paths
  // of the store (the same data moved or packed into a tar digests the same).
  std::string index_fingerprint() const;
  const FileStore& store() const { return *store_; }
  // For tools that copy the source files (hpcnet shard): item i as indexed (its files, label,
  // width/height), and its objects: label rows (a yolo index, normalised corners; empty for coco)
  // or boxes (a coco index, pixels of item.width x item.height; empty for yolo).
  const LazyItem& item(int64_t i) const;
  std::vector<YoloRow> rows_of(int64_t i) const;
  std::vector<Box> boxes_of(int64_t i) const;

 private:
  // h continued over the label rows and boxes (both fingerprints).
  uint64_t hash_objects(uint64_t h) const;
  std::shared_ptr<const FileStore> store_;
  std::vector<std::string> classes_;
  TargetKind kind_;
  std::string what_, description_;
  std::vector<LazyItem> items_;
  std::vector<YoloRow> rows_;  // yolo
  std::vector<Box> boxes_;     // coco
  bool rows_mode_ = false;     // boxes come from rows_
  int64_t decode_min_side_ = 0;
};

// Checks boxes against an image of height x width and a class count (as InMemoryDataset's
// add_boxes); InputError naming `who` ("dataset: image WHO box K ...").
void check_boxes(const Box* boxes, size_t n, int64_t height, int64_t width, size_t classes,
                 const std::string& who);
// Checks a class mask (values < classes or kIgnoreIndex); InputError naming `who` and the pixel.
void check_mask(const uint8_t* mask, int64_t height, int64_t width, size_t classes,
                const std::string& who);

}  // namespace hpcnet::data::detail
