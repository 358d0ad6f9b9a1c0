// Datasets, transforms and the DataLoader: dataset -> transforms -> batch, the first stage of the
// training pipeline. A dataset is an index of files read and decoded when an item is asked for
// (folders, archives, shards) or images held in memory (CIFAR-10's batches); an item is uint8 HWC
// RGB (3 channels) with its target: an int64 class label (classification), boxes (detection) or a
// per-pixel class mask (segmentation). Transforms turn one image into a float CHW sample written
// straight into a batch buffer and move the target with the pixels; the DataLoader assembles
// batches (B, 3, H, W) with their targets in a reproducible order, optionally on worker threads.
// Invariants: every Dataset is immutable after construction and safe to read from many threads;
// every random choice depends only on (seed, epoch, sample index), never on thread scheduling.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "hpcnet/tensor.h"

namespace hpcnet::data {

// ---------------------------------------------------------------------------------------------
// Datasets
// ---------------------------------------------------------------------------------------------

// What a dataset's images are labelled with.
enum class TargetKind {
  kLabel,  // one class per image: Example::label
  kBoxes,  // objects: Example::boxes (class + corners in pixels)
  kMask,   // a class per pixel: Example::mask, kIgnoreIndex where unlabelled
};
const char* target_kind_name(TargetKind k);  // "label", "boxes", "mask"

// Mask value of pixels that count for nothing (loss and metric), as torchvision's and VOC's 255.
inline constexpr int64_t kIgnoreIndex = 255;

// One object: its class and its corners in pixels of its image, x1 <= x2, y1 <= y2, (x1, y1) the
// top-left corner (x right, y down; pixel (r, c) covers [c, c+1) x [r, r+1)).
struct Box {
  int64_t cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  // A COCO annotation's "area" in the original image's pixels (the metric's small / medium /
  // large ranges use it, as pycocotools does); < 0: none, the box's own area is used. Resize,
  // Letterbox, flips and crops keep it (the object's); Mosaic and RandomAffine drop it.
  float area = -1;
  // A COCO crowd region (iscrowd 1): for the metric an ignore region, as pycocotools has it
  // (detections inside it count for nothing); never a training target. Every transform keeps it.
  bool crowd = false;
  bool operator==(const Box&) const = default;
};

// A decoded image.
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3) uint8 RGB
};

// One image and its target, borrowed from its dataset (valid as long as the dataset lives) or from
// the ExampleBuffer a lazy dataset decoded it into (valid until that buffer is used again).
struct Example {
  const uint8_t* pixels = nullptr;  // (height, width, 3) uint8 RGB, row-major, contiguous
  int64_t height = 0;
  int64_t width = 0;
  int64_t label = 0;           // kLabel: in [0, classes().size()); otherwise 0
  const Box* boxes = nullptr;  // kBoxes: num_boxes objects (none is an image without objects)
  int64_t num_boxes = 0;
  const uint8_t* mask = nullptr;  // kMask: (height, width) class per pixel, kIgnoreIndex = none
  size_t nbytes() const { return static_cast<size_t>(height * width * 3); }
};

// Room for an example that a dataset reads and decodes when asked (the lazy datasets the loaders
// below return): get(i, buffer) points the Example into it. One per thread and reused, so decoding
// in steady state allocates nothing once the buffers have grown to the largest image.
struct ExampleBuffer {
  Image image;                       // the decoded pixels
  std::vector<uint8_t> mask;         // the decoded mask, (height, width)
  std::vector<Box> boxes;            // the objects in the decoded image's pixels
  std::vector<uint8_t> file, mask_file;  // the encoded bytes as read
  std::vector<uint8_t> resized;          // the pixels resized for a cache (CacheOptions::resize)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Item i, from memory (InMemoryDataset: pointers into the dataset; buffer unused) or read and
  // decoded into buffer now (a lazy dataset). Requires 0 <= i < size() (HPCNET_CHECK).
  // Thread-safe with one buffer per thread. InputError naming the file when it cannot be read or
  // decoded, or its target does not fit the decoded image.
  virtual Example get(int64_t i, ExampleBuffer& buffer) const = 0;
  // Whether get() returns pointers into memory the dataset holds (the buffer is unused).
  virtual bool in_memory() const { return false; }
  // Class names; label k names classes()[k].
  virtual const std::vector<std::string>& classes() const = 0;
  // Which of Example's targets the items carry.
  virtual TargetKind target_kind() const { return TargetKind::kLabel; }
  // Where item i came from, for messages and predictions: "train/cat/0001.jpg",
  // "data_batch_1.bin#17".
  virtual std::string item_name(int64_t i) const { return "#" + std::to_string(i); }
  // One line for logs: "cifar10 train: 50000 images 32x32, 10 classes, from PATH".
  virtual std::string describe() const;
  // A dataset read from WebDataset shards: the index of each shard's first item (items lie in
  // shard order), so that a loader can stream it shard by shard (DataLoaderOptions::
  // shuffle_buffer). Empty for every other dataset.
  virtual std::vector<int64_t> shard_starts() const { return {}; }
};

// All images in one contiguous byte buffer. Loaders below return this; tests and tools may fill
// one by hand with add().
class InMemoryDataset : public Dataset {
 public:
  InMemoryDataset(std::vector<std::string> classes, std::string description = "in-memory",
                  TargetKind kind = TargetKind::kLabel);
  // Copies h*w*3 bytes of HWC RGB. Requires 0 <= label < classes().size() (InputError) and a
  // dataset of kind kLabel.
  void add(const uint8_t* hwc, int64_t height, int64_t width, int64_t label, std::string name = {});
  // kBoxes datasets: the image and its objects (classes in range, 0 <= x1 <= x2 <= width,
  // 0 <= y1 <= y2 <= height; InputError naming the image otherwise).
  void add_boxes(const uint8_t* hwc, int64_t height, int64_t width, const std::vector<Box>& boxes,
                 std::string name = {});
  // kMask datasets: the image and its (height, width) mask (values < classes().size() or
  // kIgnoreIndex; InputError naming the image and the value otherwise).
  void add_mask(const uint8_t* hwc, int64_t height, int64_t width, const uint8_t* mask,
                std::string name = {});
  // Reserves room for `images` images of `pixels` pixels (height * width) in all (an
  // optimisation only).
  void reserve(int64_t images, int64_t pixels);

  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  // Requires 0 <= i < size() (HPCNET_CHECK). Thread-safe; no allocation.
  Example get(int64_t i) const;
  Example get(int64_t i, ExampleBuffer&) const override { return get(i); }
  bool in_memory() const override { return true; }
  const std::vector<std::string>& classes() const override { return classes_; }
  TargetKind target_kind() const override { return kind_; }
  std::string item_name(int64_t i) const override;
  std::string describe() const override;
  // Number of images per label, (classes().size(),).
  std::vector<int64_t> class_counts() const;

 private:
  struct Item {
    size_t offset;
    int32_t height, width;
    int64_t label;
    size_t first_box = 0, num_boxes = 0;  // kBoxes: boxes_[first_box, first_box + num_boxes)
    size_t mask_offset = 0;               // kMask: masks_[mask_offset, + height * width)
  };
  void check_kind(TargetKind kind, const std::string& name) const;
  void add_item(const uint8_t* hwc, int64_t height, int64_t width, int64_t label, std::string name);
  std::vector<std::string> classes_;
  std::string description_;
  TargetKind kind_;
  std::vector<uint8_t> pixels_;
  std::vector<Box> boxes_;
  std::vector<uint8_t> masks_;
  std::vector<Item> items_;
  std::vector<std::string> names_;  // empty when no image was given a name
};

// A dataset restricted to base[indices[0]], base[indices[1]], ... (indices may repeat).
class Subset : public Dataset {
 public:
  // Requires every index in [0, base->size()) (InputError otherwise).
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t i, ExampleBuffer& buffer) const override;
  bool in_memory() const override { return base_->in_memory(); }
  const std::vector<std::string>& classes() const override { return base_->classes(); }
  TargetKind target_kind() const override { return base_->target_kind(); }
  std::string item_name(int64_t i) const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset>& base() const { return base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// A digest of what a dataset holds, independent of where it lies: its class names, target kind,
// and each item's name (relative to the dataset: "train/cat/0001.jpg", "data_batch_1.bin#17")
// and target (label, boxes or label rows; a lazy dataset's index, no image is read). The same
// data moved to another folder, or packed into a .tar of the same layout, gives the same digest;
// another item, label or box does not. 16 hex digits. (A checkpoint records it: --resume checks
// that --data is the run's data.)
std::string index_fingerprint(const Dataset& dataset);

// Whether class names are the placeholders a loader makes up for a dataset that names none
// (class_0, class_1, ...: a data.yaml with only nc, shards without classes.txt).
bool placeholder_class_names(const std::vector<std::string>& names);

// The CIFAR-10 class names in label order.
const std::vector<std::string>& cifar10_class_names();

// CIFAR-10 in the official binary layout: data_batch_1..5.bin (split "train", 50,000 records) or
// test_batch.bin (split "test"), each record 1 label byte + 3072 bytes (R, G, B planes of 32x32),
// converted to HWC. Class names come from batches.meta.txt when present, else
// cifar10_class_names(). `path` may be:
//   - the cifar-10-batches-bin folder itself, or a folder containing it;
//   - a folder containing cifar-10-binary.tar.gz, or that archive itself (read in memory; entries
//     cifar-10-batches-bin/..., an optional leading "./").
// Throws InputError (file and problem named) for missing files, a size that is not a multiple
// of 3073 bytes (truncated), an empty file, or a label byte >= 10 (record index named).
std::shared_ptr<InMemoryDataset> load_cifar10_binary(const std::string& path,
                                                     const std::string& split);

// torchvision-style ImageFolder: ROOT/<split>/<class>/<files>, split "train" or "test". Classes
// are the sorted sub-folder names of ROOT/<split> (hidden ones skipped), label = position, named
// by ROOT/LOC_synset_mapping.txt or ROOT/classes.txt when it maps every folder ("n01440764
// tench, Tinca tinca" lines, as ImageNet ships it);
// images are ordered by class, then as torchvision orders them (by folder path, then file name;
// sub-folders inside a class folder are included). Files ending .jpg/.jpeg/.png (any case) are
// images, other files and hidden names (".*") are skipped; JPEG and PNG are told apart by
// content. Gray, palette, alpha and 16-bit PNGs become 8-bit RGB (alpha dropped as PIL's
// convert("RGB") does, 16-bit samples reduced to their high byte, no gamma correction).
// `path` is a folder, or a .tar archive (a .tar.gz/.tgz is decompressed once to a cached .tar,
// see archive_as_tar) whose entries may carry a leading "./" and/or one top-level folder before
// <split>/. The dataset is lazy: loading lists the files (an archive's member offsets) and nothing
// else; get() reads and decodes one image (an InputError naming an undecodable one then).
// Throws InputError for an unknown split, a missing split folder, no class folders, or an empty
// class folder (named).
std::shared_ptr<Dataset> load_image_folder(const std::string& path, const std::string& split);

// Semantic segmentation: image and class-mask pairs (a kMask dataset, sorted by image path;
// lazy: listed here, decoded and checked by get()) in the generic layout (images/<split>/ with
// masks/<split>/) or PASCAL VOC's, from a folder, a .tar/.tar.gz or an Ultralytics data.yaml.
// split: train, val or test. The layouts, the masks and what is refused (InputError naming the
// file): docs/segmentation.md, "Data".
std::shared_ptr<Dataset> load_segmentation(const std::string& path, const std::string& split);

// Object detection (`--task detect`): images with boxes (a kBoxes dataset, lazy) from an
// Ultralytics dataset YAML or a COCO instances JSON, or a folder or .tar/.tar.gz holding one.
// The formats, what is accepted and what is refused (InputError): docs/detection.md, "File
// formats, exactly".
struct DetectionOptions {
  std::string coco_images;  // COCO: the folder (or archive folder) file_name is relative to
};
// What a detection loader accepted without refusing it; lines() says it once per kind.
struct DetectionReport {
  std::string format;              // "yolo" or "coco"
  std::string source;              // the YAML or JSON read
  std::string split;               // the split read
  int64_t images = 0;              // images in the dataset
  int64_t broken_links = 0;        // yolo: image links leading nowhere (left out, not in images)
  std::string first_broken_link;   //   the first one, "PATH -> TARGET"
  int64_t objects = 0;             // boxes in the dataset
  int64_t missing_labels = 0;      // yolo: images without a label file (used without objects)
  std::string first_missing;       //   the first such label file's path
  int64_t empty_labels = 0;        // yolo: label files without a row
  std::string first_empty;         //   the first such label file's path
  int64_t duplicates = 0;          // yolo: duplicate rows dropped
  int64_t duplicate_files = 0;     //   in this many label files
  std::string first_duplicate;     //   FILE:LINE of the first one
  int64_t polygons = 0;            // yolo: polygon rows taken as their bounding box
  int64_t crowd = 0;               // coco: iscrowd annotations (kept, Box::crowd)
  int64_t degenerate = 0;          // coco: boxes of zero width or height (kept)
  std::vector<std::string> notes;  // other things worth saying once (e.g. a `path` not found)
  // One line each for image links that lead nowhere, missing labels, duplicates,
  // crowd/degenerate boxes and notes ("detect:
  // 3 of 100 images of train have no label file (first: labels/train/x.txt); ..."); empty when
  // nothing needs saying (empty label files and polygons are normal and not reported). A split
  // of images without a single object gets no_objects() instead of the missing-labels line.
  std::vector<std::string> lines() const;
  // "" when the split has an object (or no image); else what is wrong, for a warning (val) or a
  // refusal (train: nothing to learn from): "no labels found in data.yaml: every image of train
  // (8) has no objects: 8 have no label file (first: labels/train/a.txt); check labels/train/
  // (one NAME.txt per image NAME.jpg, rows 'class cx cy w h')".
  std::string no_objects() const;
};
struct DetectionData {
  std::shared_ptr<Dataset> dataset;          // kBoxes, lazy (images decoded by get())
  std::vector<std::string> classes;          // = dataset->classes()
  std::vector<int64_t> image_ids;            // (size,) coco: item i's image id; yolo: i
  // Class k's category id in a COCO results file: coco: the JSON's; yolo: k + 1 (Ultralytics'
  // class_map for a dataset other than COCO itself).
  std::vector<int64_t> category_ids;
  DetectionReport report;
};
DetectionData load_detection_dataset(const std::string& path, const std::string& split,
                                     const DetectionOptions& options = {});
// Whether load_detection_dataset(path, split) has a split of that name to read (the YAML has a
// non-empty key; the JSON for that split exists), reading names and the YAML/JSON only.
// False for an unusable path.
bool detection_has_split(const std::string& path, const std::string& split);

// The names open_dataset knows (--dataset), in the order help texts list them.
const std::vector<std::string>& dataset_formats();
// The dataset factory. name:
//   "cifar10"     auto-detects: a .tar/.tar.gz holding cifar-10-batches-bin/ or an image folder
//                 (train/<class>/...); a folder holding cifar-10-batches-bin/ or
//                 cifar-10-binary.tar.gz; the batches folder itself; or an image-folder layout
//                 (a folder with train/ or test/).
//   "imagefolder" load_image_folder(path, split).
//   "segmentation" load_segmentation(path, split) (also "voc": the same loader).
//   "webdataset"  load_webdataset(path) (hpcnet/shards.h); any name reads a path that
//                 is_webdataset_path recognises (a brace pattern of .tar shards, a shard list,
//                 a folder of .tar files) as WebDataset shards.
// split: "train" or "test" ("val" too for segmentation). Unknown name/split or unusable path:
// InputError.
std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& path,
                                      const std::string& split);
// Whether a dataset of that name holds a split of its own named `split` at path (segmentation:
// images/<split>/ or ImageSets/Segmentation/<split>.txt), without reading it.
bool has_split(const std::string& name, const std::string& path, const std::string& split);

// One walk per job: rank 0 opens a dataset (walks the folder, reads the JSON or indexes the
// archive) and sends its index to the other ranks, which rebuild the dataset from it without
// touching the files until they read their own share of images. dataset_index_bytes: a lazy
// dataset's whole index as bytes (paths or archive offsets, labels, boxes, mask paths, class
// names); "" for a dataset held in memory (CIFAR-10's batches), which each rank reads itself.
// dataset_from_index_bytes: the same dataset (the same items, fingerprint and decoded images),
// archives opened for reading by offset, not indexed again; InputError for malformed bytes. The
// bytes are for the ranks of one job (the same build): raw structs, no versioning.
std::string dataset_index_bytes(const Dataset& dataset);
std::shared_ptr<Dataset> dataset_from_index_bytes(const std::string& bytes);

// ---------------------------------------------------------------------------------------------
// Caching decoded images (--cache, as Ultralytics' cache=)
// ---------------------------------------------------------------------------------------------

// none  every image is decoded when the loader reads it: memory holds the index and what is in
//       flight (workers x prefetch x batch), whatever the dataset's size.
// ram   every image is kept in memory the first time it is read (the first epoch decodes in the
//       loader's workers, later epochs decode nothing); first the memory it needs is estimated
//       (from up to 16 images spread over the dataset) and the cache is refused with that figure
//       when the machine has less available (MemAvailable).
// disk  every image is decoded once into DIR/<fingerprint of the index>.hpcache (a temporary file
//       renamed into place; reused by later runs over the same index) and memory-mapped.
// auto  ram when the decoded images need under a quarter of the available memory, else none.
// Every mode first decodes up to 16 images spread over the dataset: the estimate, and a probe,
// so that files that are not images fail before a run writes anything.
// A dataset already in memory (CIFAR-10's binary batches) is returned as it is, mode "memory".
// The same images decode to the same examples in every mode (training is bit-identical).
struct CacheOptions {
  std::string mode = "auto";
  std::string dir;  // disk: the folder; "" = $HPCNET_CACHE_DIR, $XDG_CACHE_HOME/hpcnet or
                    // ~/.cache/hpcnet
  int threads = 0;  // decoding threads for ram and disk (0 = all cores)
  // ram and disk keep the images of a class-label dataset resized (bilinear, exactly as a leading
  // Resize of this size, Compose::leading_resize()) when both are > 0, as Ultralytics' cache keeps
  // images at the training size: the pipeline's Resize then has nothing to do, so training is
  // the same to the bit, and memory is height * width * 3 bytes an image. {0, 0}: as decoded.
  std::array<int64_t, 2> resize{0, 0};
};
struct CachedDataset {
  std::shared_ptr<const Dataset> dataset;
  std::string mode;  // none, ram, disk or memory
  std::string line;  // one line for the log: the choice and why ("cache: ram (...)")
};
// InputError for an unknown mode, a ram cache that does not fit, or a cache folder that cannot be
// written (naming it).
CachedDataset cache_dataset(std::shared_ptr<const Dataset> dataset, const CacheOptions& options);
// Bytes the decoded images and masks of a dataset take, estimated from up to `samples` items
// spread evenly over it (exact when every item is sampled).
int64_t estimate_decoded_bytes(const Dataset& dataset, int64_t samples = 16);
// MemAvailable from /proc/meminfo, bounded by the cgroup's memory limit when one is set; bytes.
int64_t available_memory_bytes();
// The folder hpcnet caches derived data in (decompressed archives, decoded images):
// $HPCNET_CACHE_DIR, else $XDG_CACHE_HOME/hpcnet (when absolute), else $HOME/.cache/hpcnet; ""
// when none of them is set (callers then ask for HPCNET_CACHE_DIR).
std::string default_cache_dir();

// ---------------------------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------------------------

// The decoders' guard against decompression bombs: an image (or class mask) whose header claims
// more than this many pixels (width x height) is refused before its pixels are allocated or
// decoded, with an InputError naming the file, its size, the limit and --max-image-pixels.
// Process-wide, read by every decoding thread; `hpcnet train|eval|predict --max-image-pixels N`
// sets it. Requires n >= 1 (InputError otherwise).
inline constexpr int64_t kDefaultMaxImagePixels = 100'000'000;  // like Pillow's bomb guard
void set_max_image_pixels(int64_t n);
int64_t max_image_pixels();

// Decodes a JPEG or PNG held in memory (format told by its first bytes). `name` is used in the
// InputError thrown for data that is not a decodable JPEG/PNG or is over max_image_pixels().
// The image comes out upright: an EXIF orientation (a JPEG's APP1 "Exif" block, a PNG's eXIf
// chunk) is applied as Pillow's ImageOps.exif_transpose applies it (OpenCV's imread and
// Ultralytics do the same), so height and width are the upright picture's. Every reader decodes
// so: the dataset loaders, the caches and predict.
// min_side > 0: a JPEG is decoded at the smallest of libjpeg-turbo's DCT scales (1/8 ... 8/8)
// whose shorter side is still at least min_side (see set_decode_min_side).
Image decode_image(const uint8_t* data, size_t size, const std::string& name,
                   int64_t min_side = 0);
// Reads and decodes one file; InputError naming the file when unreadable or undecodable, when it
// is not a regular file (a folder, FIFO or device) or when it is over 1 GiB.
Image read_image_file(const std::string& path, int64_t min_side = 0);
// Decodes the JPEGs of a lazy dataset of class labels at the smallest DCT scale whose shorter
// side is still at least min_side (0: full size; the task's decode_min_side()): decoding a
// 400-pixel photograph for a 32-pixel model then computes an eighth of its rows and columns. Every
// later reader (the loader, --cache ram and disk) sees the same reduced image. No effect on
// datasets in memory nor on boxes or masks (whose pixels are the full image's). Call before the
// dataset is shared.
void set_decode_min_side(Dataset& dataset, int64_t min_side);
// PNG files in memory: an RGB image (height, width, 3), or an 8-bit palette image whose pixel is
// an index into `palette` (at most 256 colours; an index past it is an InputError). Error when
// libpng fails.
std::vector<uint8_t> encode_png_rgb(const uint8_t* rgb, int64_t height, int64_t width);
std::vector<uint8_t> encode_png_index(const uint8_t* index, int64_t height, int64_t width,
                                      const std::vector<std::array<uint8_t, 3>>& palette);
// Drawing on (height, width, 3) RGB pixels in place (src/data/draw.cpp): text in a built-in 5x7
// font (upper case, digits, a few signs) scaled by `scale`, its width; box outlines with label
// tabs.
int64_t text_width(const std::string& text, int64_t scale);
void draw_text(uint8_t* px, int64_t height, int64_t width, int64_t x, int64_t y,
               const std::string& text, const std::array<uint8_t, 3>& color, int64_t scale);

// A box to draw: corners in pixels (clipped to the image), its colour and label ("" for none).
struct LabeledBox {
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  std::array<uint8_t, 3> color{};
  std::string label;
};
struct PixelRect {
  int64_t x = 0, y = 0, width = 0, height = 0;
};
// The line width boxes are drawn with on a height x width image, as Ultralytics' annotator:
// max(round((height + width) / 2 * 0.003), 2) (round half to even, as Python's round); 1 on
// images under 256 pixels on their longer side. Label text is scaled by the same number.
int64_t box_line_width(int64_t height, int64_t width);
// Draws every box's outline, then every label in a filled tab of the box's colour (text in black
// or white, whichever stands out), in order (give the most confident first): each tab goes above
// its box, else inside its top, below it, or inside its bottom, the first of these that lies in
// the image and overlaps no tab placed before it (where every place overlaps, the least).
// Returns the tabs' rectangles, in the boxes' order (width 0 for a box without a label).
std::vector<PixelRect> draw_boxes(uint8_t* px, int64_t height, int64_t width,
                                  const std::vector<LabeledBox>& boxes);
// A legend at the image's top left, on a darkened panel: one line per entry, a square of its
// colour (none where `swatch` is false) and its text in white, scaled as box labels
// (box_line_width). Entries past the image's height are left out. Returns the panel.
struct LegendEntry {
  std::string text;
  std::array<uint8_t, 3> color{};
  bool swatch = true;
};
PixelRect draw_legend(uint8_t* px, int64_t height, int64_t width,
                      const std::vector<LegendEntry>& entries);
// n class colours: PASCAL VOC's colour map (0 black, 1 dark red, 2 dark green, ...; 255 white).
std::vector<std::array<uint8_t, 3>> class_palette(int64_t n);

// The image files a prediction reads from `path`: the file itself, or every JPEG/PNG file in the
// folder (not its sub-folders; hidden names skipped), sorted by name. InputError when the path
// does not exist or a folder holds no image. An entry with an image's name that is a link leading
// nowhere is listed too: reading it then says so (predict reports it on its own line). With
// with_videos, a folder's videos (is_video_name, include/hpcnet/video.h) are listed too.
std::vector<std::string> list_image_files(const std::string& path, bool with_videos = false);

// ---------------------------------------------------------------------------------------------
// Validation split
// ---------------------------------------------------------------------------------------------

struct TrainValSplit {
  std::vector<int64_t> train;  // ascending
  std::vector<int64_t> val;    // ascending
};

// The fixed hold-out rule (reproduced by a Python script, so keep it exactly):
//   rng  = Rng(0x5EED5EED, 0)                      (xoshiro256**, see rng.h)
//   perm = random_permutation(n_total, rng)        (Fisher-Yates, see rng.h)
//   val  = sorted(perm[n_total - n_val:]),  train = sorted(perm[:n_total - n_val])
// Requires 0 <= n_val < n_total (InputError otherwise).
constexpr uint64_t kValSplitSeed = 0x5EED5EEDULL;
TrainValSplit split_train_val(int64_t n_total, int64_t n_val);

// ---------------------------------------------------------------------------------------------
// Transforms (torchvision names and semantics)
// ---------------------------------------------------------------------------------------------

// Every transform moves the example's target with its pixels: boxes are mapped through the same
// crops, flips and scalings (then clipped to the output; a box that clipping leaves narrower or
// shorter than one pixel is dropped, as torchvision's SanitizeBoundingBoxes(min_size=1), while one
// that small, or of zero size, in the image itself is kept: the metric counts it), and masks are
// resampled nearest on the same index map, with kIgnoreIndex where the output shows padding.

// Resizes to height x width, bilinear with align_corners=False and no antialiasing (as
// torch.nn.functional.interpolate), rounding to uint8; masks nearest (source index
// floor((y + 0.5) * H / height), as torchvision's InterpolationMode.NEAREST_EXACT); boxes scaled.
// An image already of that size is untouched. Must come first.
struct Resize {
  int64_t height = 0;
  int64_t width = 0;
};
// torchvision's Resize(size) with an int: the shorter side becomes `size`, the longer one
// int(size * long / short) (aspect kept), bilinear as Resize. Must come first (ImageNet's
// evaluation: ResizeShorter(imgsz * 256 / 224) then CenterCrop(imgsz)).
struct ResizeShorter {
  int64_t size = 0;
};
// torchvision's RandomResizedCrop(size, scale, ratio) with bilinear resampling (as Resize: no
// antialiasing): a window of area uniform(scale) x H x W and aspect ratio exp(uniform(log ratio))
// (w = round(sqrt(area ratio)), h = round(sqrt(area / ratio))) at a uniform position, tried up to
// 10 times, else the whole image cropped to the ratio range at its centre; the window is resized
// to size x size. Masks nearest, boxes mapped and clipped. Must come first.
struct RandomResizedCrop {
  int64_t size = 224;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};
// torchvision's CenterCrop(size): the size x size window at top = round((H - size) / 2), left =
// round((W - size) / 2) (padded with zeros where the image is smaller). Before Normalize.
struct CenterCrop {
  int64_t size = 0;
};
// Ultralytics' LetterBox(new_shape=(size, size), auto=False, center=True): scales by
// r = min(size / H, size / W) (bilinear as Resize) to (round(H r), round(W r)), then pads to
// size x size with `fill` (114, gray), the image centred (top = round(dh / 2 - 0.1),
// left = round(dw / 2 - 0.1)); masks get kIgnoreIndex in the padding. Must come first.
// stride 0: a size x size square (training, validation, export). stride > 0: Ultralytics'
// predict (LetterBox(auto=True)): the scaled image padded on each axis only up to the next
// multiple of stride (a 640x480 frame at size 640, stride 32, stays 640x480: 25% fewer pixels
// than the square), centred as in the square.
struct Letterbox {
  int64_t size = 640;
  uint8_t fill = 114;
  int64_t stride = 0;
};
// Where a letterboxed image lies in its out_height x out_width canvas (the size x size square
// when stride is 0): scaled to new_height x new_width (a point maps as x * new_width / width +
// left, y * new_height / height + top, as the pixels do) at offset (top, left).
struct LetterboxGeometry {
  double scale = 1;
  int64_t new_height = 0, new_width = 0;  // the scaled image
  int64_t top = 0, left = 0;              // its offset in the canvas
  int64_t out_height = 0, out_width = 0;  // the canvas
};
LetterboxGeometry letterbox_geometry(int64_t height, int64_t width, int64_t size,
                                     int64_t stride = 0);
// A one-byte-per-pixel map (a class mask) (height, width) resampled nearest to (out_height,
// out_width) as Resize resamples masks: source index floor((y + 0.5) * height / out_height).
std::vector<uint8_t> resize_nearest(const uint8_t* src, int64_t height, int64_t width,
                                    int64_t out_height, int64_t out_width);

// uint8 HWC [0, 255] -> float CHW [0, 1]: x = float(v) / 255.
struct ToTensor {};
// x = (x - mean[c]) / std[c] per channel, in float32. Requires every std > 0.
struct Normalize {
  std::array<float, 3> mean{};
  std::array<float, 3> std{1.f, 1.f, 1.f};
};
// Pads every side by `padding` zeros (torchvision's fill=0) and crops a size x size window at
// top = rng.randint(H + 2p - size + 1), then left = rng.randint(W + 2p - size + 1).
// Requires size <= H + 2p and W + 2p (InputError otherwise).
struct RandomCrop {
  int64_t size = 0;
  int64_t padding = 0;
};
// Random scale and crop, for segmentation (torchvision's segmentation reference: RandomResize then
// RandomCrop with pad_if_needed): the image is resized (bilinear, as Resize; masks nearest) to a
// square of round(size s) pixels, s uniform in [scale_min, scale_max], then a size x size window
// at a uniform random offset is cut from it; a side smaller than size is padded equally on both
// sides first (image 0, mask kIgnoreIndex). Must come first (in place of Resize).
struct RandomScale {
  int64_t size = 0;
  double scale_min = 0.5, scale_max = 2.0;
};
// Mirrors left-right when rng.uniform() < p.
struct RandomHorizontalFlip {
  double p = 0.5;
};
// Cutout (DeVries and Taylor 2017): zeroes a size x size square of the output (all channels)
// centred at y = rng.randint(H), then x = rng.randint(W), clipped at the borders; the zeros are
// in the output's units (after Normalize), as the reference implementation. Comes after ToTensor
// and after every RandomCrop.
struct Cutout {
  int64_t size = 16;
};
// Ultralytics' RandomPerspective without perspective (detection training with mosaic off): the
// image is resized so its long side is `size` (the short side rounded up; bilinear), then warped
// (bilinear, border `fill`) by M = T S R C into size x size: C moves its centre to the origin, R
// rotates by uniform(+-degrees) and scales by s = uniform(1 +- scale), S shears by
// uniform(+-shear) degrees on each axis, T moves the centre to uniform(0.5 +- translate) x size.
// Boxes: the four corners mapped, their bounding box clipped, kept when Ultralytics'
// box_candidates keeps it (width and height > 2 pixels, area > 10% of the original box times s,
// aspect ratio < 100). Masks nearest, kIgnoreIndex outside. Must come first.
struct RandomAffine {
  int64_t size = 640;
  double degrees = 0, translate = 0.1, scale = 0.5, shear = 0;
  uint8_t fill = 114;
};
// Ultralytics' RandomHSV: gains r = uniform(-1, 1) x (h, s, v); in OpenCV's 8-bit HSV (hue 0..179)
// hue -> (hue + 180 r_h) mod 180, saturation -> clip(sat (1 + r_s)), value -> clip(val (1 + r_v))
// (saturation 0 kept). Comes after the first transform and before ToTensor.
struct RandomHSV {
  double h = 0.015, s = 0.7, v = 0.4;
};
// Ultralytics' Mosaic (4 images), with probability p: the sample's image and three others drawn
// uniformly from the dataset (Ultralytics draws them from a buffer of its recently loaded
// images), each resized so its long side is `size` (as RandomAffine), placed as the top-left,
// top-right, bottom-left and bottom-right quarter around a centre (xc, yc), each uniform in
// [size / 2, 3 size / 2) (truncated), of a 2 size x 2 size canvas of gray 114; boxes shifted,
// clipped to the canvas, those of zero area dropped. Must come first, followed by a RandomAffine
// of the same size, which maps the canvas (or, without mosaic, the image) to size x size. Needs
// the dataset: the DataLoader calls Compose::apply(dataset, index, ...). No masks.
struct Mosaic {
  int64_t size = 640;
  double p = 1.0;
};
using Transform =
    std::variant<ToTensor, Normalize, RandomCrop, RandomHorizontalFlip, Cutout, Resize, Letterbox,
                 RandomScale, RandomAffine, RandomHSV, Mosaic, ResizeShorter, RandomResizedCrop,
                 CenterCrop>;

// A pipeline of transforms applied in order, like torchvision.transforms.Compose. Each sample
// draws from its own Rng(sample_seed), in transform order. It must contain exactly one ToTensor;
// Normalize (at most one) comes after it; crops and flips come before Normalize (before or after
// ToTensor: zero fill is the same either way); Resize or Letterbox (at most one) comes first. The
// whole pipeline after the resize runs fused in one pass over the output: no allocation per
// sample (a resize writes into a buffer kept per thread).
class Compose {
 public:
  Compose();                                            // {ToTensor{}}
  explicit Compose(std::vector<Transform> transforms);  // InputError when ordered wrongly

  // Output (3, H, W) for an input of height x width; InputError when a crop does not fit.
  std::array<int64_t, 3> output_shape(int64_t height, int64_t width) const;
  // Writes the transformed sample to out, (3, H, W) float32 per output_shape (overwrites).
  void apply(const Example& ex, uint64_t sample_seed, float* out) const {
    apply(ex, sample_seed, out, nullptr, nullptr);
  }
  // The same, moving the target too: boxes_out (when not null) receives ex's boxes as they lie
  // in the output (replacing its contents); mask_out (when not null and ex has a mask) receives
  // the (H, W) int64 mask of the output (overwrites). The pixels are the same as apply()'s.
  void apply(const Example& ex, uint64_t sample_seed, float* out, std::vector<Box>* boxes_out,
             int64_t* mask_out) const;
  // Item `index` of `dataset`, already read as `example`: as apply(example, ...), and the
  // transforms that read other items (Mosaic) read them from `dataset`.
  void apply(const Dataset& dataset, int64_t index, const Example& example, uint64_t sample_seed,
             float* out, std::vector<Box>* boxes_out, int64_t* mask_out) const;
  // Whether a transform reads other items of the dataset (Mosaic).
  bool needs_dataset() const;
  // (height, width) of a leading Resize, which is deterministic (a cache may keep images at that
  // size: the Resize then has nothing to do); {0, 0} when the pipeline starts otherwise.
  std::array<int64_t, 2> leading_resize() const;
  // The pipeline's Normalize, or the identity (mean 0, std 1: pixels / 255) when it has none.
  Normalize normalization() const;
  const std::vector<Transform>& transforms() const { return transforms_; }
  std::string str() const;  // "Compose(RandomCrop(32, padding=4), ToTensor(), ...)"

 private:
  // from_mosaic: ex is a Mosaic canvas, which the RandomAffine after it takes as it is.
  void apply_impl(const Example& ex, uint64_t sample_seed, float* out, std::vector<Box>* boxes_out,
                  int64_t* mask_out, bool from_mosaic) const;
  std::vector<Transform> transforms_;
  std::array<std::array<float, 256>, 3> lut_{};  // uint8 -> ToTensor (+ Normalize) per channel
};

// ---------------------------------------------------------------------------------------------
// DataLoader
// ---------------------------------------------------------------------------------------------

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;          // 0: load in the calling thread; N: N threads prefetching
  int64_t prefetch_factor = 2;  // with workers, at most num_workers * prefetch_factor batches ready
  uint64_t seed = 0;
  // DistributedSampler (torch.utils.data.DistributedSampler, drop_last=False): with world_size W
  // > 1 this loader reads only its rank's share of every epoch, see DataLoader. Requires
  // 0 <= rank < world_size.
  int rank = 0;
  int world_size = 1;
  // > 0 (a dataset with shard_starts() only): stream the shards as webdataset does instead of
  // drawing items from a global permutation. Each epoch the shards are put in an order (shuffled
  // with shuffle, of seed and epoch; in turn otherwise) and dealt to the ranks in turn (shard k of
  // that order to rank k mod world_size; with fewer shards than ranks, the stream's items are
  // dealt instead); each rank reads its shards' items in order, through a buffer of this many
  // items from which each next item is drawn at random (webdataset's .shuffle(N); no draw without
  // shuffle), so reads stay within a window of the shard being read. A rank's stream is cut or
  // repeated from its start to samples_per_epoch() items, so every rank takes as many steps.
  int64_t shuffle_buffer = 0;
};

struct Batch {
  Tensor images;                        // (B, 3, H, W) float32
  Tensor labels;                        // (B,) int64 (kLabel datasets; zeros otherwise)
  std::vector<std::vector<Box>> boxes;  // kBoxes: (B,) lists of objects in output pixels
  Tensor masks;                         // kMask: (B, H, W) int64, kIgnoreIndex where unlabelled
  int64_t size = 0;                     // B
  int64_t index = 0;                    // position of this batch in its epoch
  std::vector<int64_t> indices;         // (B,) dataset index of each sample
  std::vector<std::array<int64_t, 2>> sizes;  // (B,) each image's (height, width) before transforms
};

// Order of epoch e: shuffle ? random_permutation(n, Rng(seed, 1000 + e)) : 0..n-1, the same on
// every rank. With world_size W > 1 (DistributedSampler semantics) it is padded to a multiple of W
// by repeating it from its start (cyclically when W > n), and rank r keeps positions r, r + W, r +
// 2W, ...: every rank gets ceil(n / W) samples and as many batches, the shares are disjoint except
// for the W * ceil(n / W) - n padded repeats, and together they cover the epoch. Batch b of the
// share holds share[b * batch_size, ...]; the last partial batch is kept unless drop_last (so batch
// b of every rank has the same size). Sample i of the dataset seen in epoch e is transformed with
// Compose::apply(.., mix_seed(seed, e, i), ..), i being the index in the loader's own dataset (a
// Subset's position, not its base's), so the batches are identical for any num_workers. With
// workers, batches are built ahead into a bounded queue and delivered in order; an exception in a
// worker is rethrown by next() (and ends the epoch). Destroying the loader or calling begin_epoch
// mid-epoch stops and discards work cleanly.
//   loader.begin_epoch(e); Batch b; while (loader.next(b)) { ... }
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, Compose transform, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;
  int64_t dataset_size() const { return dataset_->size(); }
  // Samples this rank reads per epoch: ceil(dataset_size() / world_size).
  int64_t samples_per_epoch() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  // This rank's sample order of an epoch (a pure function of seed, epoch, n, shuffle, rank,
  // world_size), samples_per_epoch() indices into dataset().
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Starts epoch e (any epoch, any time; work of an unfinished epoch is dropped) at batch
  // first_batch (0 <= first_batch <= num_batches()): batches are a pure function of the epoch
  // and their index, so a run resumed inside an epoch gets the batches it would have had.
  void begin_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch into out; false at the end of the epoch. Starts epoch 0
  // when no epoch was begun.
  bool next(Batch& out);

 private:
  struct Shared;
  void build_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t b, Batch& out) const;
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  Compose transform_;
  DataLoaderOptions options_;
  std::vector<int64_t> shard_starts_;  // with shuffle_buffer: the dataset's shard_starts()
  bool started_ = false;
  // Synchronous mode (num_workers == 0).
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;
  // Worker mode.
  std::unique_ptr<Shared> shared_;
};

// ---------------------------------------------------------------------------------------------
// Download
// ---------------------------------------------------------------------------------------------

inline constexpr const char* kCifar10Url =
    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
inline constexpr const char* kCifar10Md5 = "c32a1d4ab5d03f1284b67883e8d87530";
inline constexpr const char* kCifar10Archive = "cifar-10-binary.tar.gz";

// Downloads url to dir/cifar-10-binary.tar.gz (creating dir): libcurl follows redirects, fails on
// HTTP errors and on a stalled transfer (connect timeout connect_timeout_s, abort when slower than
// 1 byte/s for stall_timeout_s). Bytes go to dir/cifar-10-binary.tar.gz.part, whose MD5 (OpenSSL
// EVP) must equal expected_md5 (lower-case hex; empty skips the check); then it is flushed and
// renamed into place. When the archive is already there with the right MD5 nothing is fetched.
// On failure nothing is left behind and InputError says what failed and where to put the data by
// hand. Returns the archive's path.
std::string download_cifar10(const std::string& dir, const std::string& url = kCifar10Url,
                             const std::string& expected_md5 = kCifar10Md5,
                             long connect_timeout_s = 30, long stall_timeout_s = 60);

// MD5 of a file as lower-case hex (InputError when unreadable).
std::string file_md5(const std::string& path);

}  // namespace hpcnet::data
