// Helpers shared by the files of src/data (not part of the public API): whole-file and archive
// reading, path tests, the image-folder builder and a reusable JPEG/PNG decoder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "src/data/file_tree.h"

namespace hpcnet::data::detail {

// The most bytes one input file, or one archive member, may hold: a larger one is refused from
// its size (stat, or the archive header's claim) before any buffer is reserved.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t{1} << 30;
// The most classes a dataset may name (a dataset YAML's names, COCO's categories, WebDataset
// labels without a classes.txt).
inline constexpr int64_t kMaxClasses = 100'000;

// Whole file into memory; InputError "<what>: cannot read PATH: <reason>" on failure, when PATH
// is not a regular file (a folder, FIFO or device: refused from stat, before opening it) or holds
// more than max_bytes.
std::vector<uint8_t> read_whole_file(const std::string& path, const std::string& what,
                                     uint64_t max_bytes = kMaxInputFileBytes);
// Whether path is a symbolic link that leads nowhere (its target is missing, or the links loop);
// *target, when not null, gets what the link holds. The loaders count such links among a split's
// images and say so, instead of dropping them unseen; reading one says what it is.
bool is_broken_link(const std::string& path, std::string* target = nullptr);
// What a stat mode is, for "not a regular file (...)": "a folder", "a FIFO", ...
const char* file_kind(unsigned mode);
// A byte limit for messages: "1 GiB", "64 MiB" or "N bytes".
std::string limit_str(uint64_t bytes);
// The same into out, whose capacity is reused (a loader's per-thread buffer).
void read_file_into(const std::string& path, const std::string& what, std::vector<uint8_t>& out,
                    uint64_t max_bytes = kMaxInputFileBytes);
// A 64-bit FNV-1a digest of bytes, continuing from h (cache keys; not cryptographic).
uint64_t fnv1a(const void* data, size_t size, uint64_t h = 0xcbf29ce484222325ULL);
inline uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ULL) {
  return fnv1a(s.data(), s.size(), h);
}
// 16 lower-case hex digits.
std::string hex64(uint64_t v);

// True for names ending .tar, .tar.gz, .tgz (any case).
bool is_archive_name(const std::string& path);
// True for names ending .jpg, .jpeg, .png (any case).
bool is_image_name(const std::string& name);
std::string to_lower(std::string s);
// "a/b/c" -> {"a","b","c"}; empty components dropped.
std::vector<std::string> split_path(const std::string& p);

struct ArchiveEntry {
  std::string path;  // normalised: no leading "./" or "/"
  std::vector<uint8_t> data;
};
// Reads a .tar/.tar.gz (any format/filter libarchive knows) sequentially. For every entry,
// want(path, is_dir) decides whether a regular file's bytes are kept (it is also called for
// directories, whose result is ignored, so callers can note them). InputError naming the archive
// when it cannot be opened or read, and naming the member too when a kept one claims (or turns
// out to hold) more than kMaxInputFileBytes, checked before its buffer is reserved.
std::vector<ArchiveEntry> scan_archive(const std::string& archive,
                                       const std::function<bool(const std::string&, bool)>& want);
// The same for an archive held in memory (size bytes at data); messages name it `name`.
std::vector<ArchiveEntry> scan_archive_memory(
    const uint8_t* data, size_t size, const std::string& name,
    const std::function<bool(const std::string&, bool)>& want);

class TarFile;

// The pixels of ex resized to (height, width) into dst (height * width * 3 bytes): the same
// bilinear resampling, to the byte, as a leading Resize{height, width} of a Compose.
void resize_bilinear(const Example& ex, int64_t height, int64_t width, uint8_t* dst);

// One image file found for an image folder.
struct ImageFile {
  int64_t label = 0;
  std::string rel_dir;  // folder below the class folder, "" for files directly in it
  std::string file;     // file name
  std::string display;  // item_name(): "train/cat/0001.jpg" (relative to the root/archive)
  FileRef ref;          // where its bytes are
};
// Orders files as torchvision does, checks no class is empty (class_dirs[k] names the folder of
// class k in messages) and builds the lazy dataset reading them from store.
std::shared_ptr<Dataset> build_image_folder(std::vector<std::string> classes,
                                            const std::vector<std::string>& class_dirs,
                                            std::vector<ImageFile> files,
                                            std::shared_ptr<const FileStore> store,
                                            std::string description);

// Readable class names for an image folder's class folders from a LOC_synset_mapping.txt or
// classes.txt beside <split>/ ("n01440764 tench, Tinca tinca": the folder, then its name): the
// folders themselves unless the file names every one; a name used twice gets its folder added.
std::vector<std::string> readable_class_names(const std::vector<std::string>& folders,
                                              const std::string& text);

// The image-folder layout of an indexed tar (archive: the file the user named, for messages).
std::shared_ptr<Dataset> image_folder_from_tar(const std::string& archive, const std::string& split,
                                               std::shared_ptr<const TarFile> tar);
// A predicate keeping image files that may belong to split (at depth 0 or below one top-level
// folder) and recording into *dirs every folder up to depth 3, whether it has its own entry or is
// implied by a file's path.
bool image_folder_want(const std::string& split, const std::string& path, bool is_dir,
                       std::set<std::string>* dirs);

// CIFAR-10 binary batches from memory. files: (display name, bytes) in record order.
std::shared_ptr<InMemoryDataset> cifar10_from_buffers(
    const std::vector<std::pair<std::string, const std::vector<uint8_t>*>>& files,
    const std::vector<uint8_t>* meta, const std::string& meta_name, const std::string& description);
// Names of the batch files of a split: {"data_batch_1.bin", ...} or {"test_batch.bin"}.
std::vector<std::string> cifar10_split_files(const std::string& split);
// Whether an archive path is a CIFAR-10 binary file of interest for split (batch or meta file,
// at the top or inside a cifar-10-batches-bin folder); *base gets its file name.
bool cifar10_archive_member(const std::string& path, const std::string& split, std::string* base);
// Builds the dataset from archive entries kept with cifar10_archive_member (InputError naming a
// missing member).
std::shared_ptr<InMemoryDataset> cifar10_from_archive_entries(
    const std::string& archive, const std::string& split, const std::vector<ArchiveEntry>& entries);

void check_split(const std::string& split, const std::string& what);

// Whether a segmentation dataset at path (folder or archive; see load_segmentation) holds
// images/<split>/ or ImageSets/Segmentation/<split>.txt. An archive's entry names are read (no
// data kept); false when path is neither.
bool segmentation_has_split(const std::string& path, const std::string& split);

// The class names of a segmentation dataset's Ultralytics data.yaml (its text; file names it in
// messages, as "segmentation: FILE..."): "background", then `names` (a list, or a map numbered
// 0, 1, ...), so mask value 1 + k is class k. InputError for YAML that does not parse, names that
// are not strings, a map not numbered 0, 1, ... or no names.
std::vector<std::string> data_yaml_class_names(const std::string& text, const std::string& file);

// One row of a YOLO label file, as a box in normalised corners (0 <= x1 <= x2 <= 1, the same for
// y): `class cx cy w h` or a polygon's bounding box.
struct YoloRow {
  int64_t cls = 0;
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  bool polygon = false;
  int64_t line = 0;  // 1-based line in its file
};
// The rows of a label file's text (see load_detection_dataset): blank lines skipped, "\r\n"
// accepted, coordinates within 1e-5 outside 0..1 clamped, exact duplicate rows (the same class
// and box) dropped after their first, their count added to *duplicates (and the line of the
// first into *first_duplicate_line) when not null. Requires num_classes >= 1. InputError
// "detect: FILE:LINE: ..." for a bad row.
std::vector<YoloRow> parse_yolo_label(const std::string& text, const std::string& file,
                                      int64_t num_classes, int64_t* duplicates = nullptr,
                                      int64_t* first_duplicate_line = nullptr);
// Rows in pixel corners of a width x height image (as data::Box requires).
std::vector<Box> yolo_rows_to_boxes(const std::vector<YoloRow>& rows, int64_t height,
                                    int64_t width);

// An Ultralytics dataset YAML: the root (`path`), each split's image folders, the class names.
struct DetectionYaml {
  std::string path;                           // `path`, "" when missing
  std::vector<std::string> train, val, test;  // folders as written (empty: no such split)
  std::vector<std::string> names;
};
// InputError "detect: FILE: ..." for YAML that does not parse or is not a map, names not strings
// or not numbered 0, 1, ..., an `nc` that disagrees, no names and no nc, over 100,000 classes.
DetectionYaml parse_detection_yaml(const std::string& text, const std::string& file);

// A COCO instances JSON, checked: each image with its boxes (pixel corners, class indices).
struct CocoImage {
  int64_t id = 0;
  std::string file_name;
  int64_t width = 0, height = 0;
  std::vector<Box> boxes;
};
struct CocoInstances {
  std::vector<std::string> classes;   // by ascending category id
  std::vector<int64_t> category_ids;  // (classes.size(),) ascending
  std::vector<CocoImage> images;      // ascending id
  int64_t annotations = 0;            // kept (boxes in all)
  int64_t crowd = 0, degenerate = 0;  // of those: crowd; others of zero width or height
};
// InputError "detect: FILE: <field>: ..." for JSON that does not parse, a missing or mistyped
// field, duplicate image or category ids, an annotation of an unknown image or category, a bbox
// with a negative, non-finite or out-of-image (by more than 1 pixel) extent.
CocoInstances parse_coco_instances(const std::string& text, const std::string& file);

// The EXIF orientation of an EXIF block: 1 (upright as stored) ... 8, from tag 0x0112 of IFD0 as
// Pillow 13's Image.getexif() reads it for ImageOps.exif_transpose (the first entry with a value
// decides, by its first value: any number type equal to 1..8; tests/fixtures/exif/exif_cases.json
// holds Pillow's answers for 97 blocks). data: a TIFF header and IFD0 ("II*\0" or "MM\0*"), as a
// PNG's eXIf chunk holds it, or after "Exif\0\0" as in a JPEG's APP1 marker. 1 when the tag is
// absent, unreadable or no orientation. Reads only data[0, size) (untrusted bytes).
int exif_orientation(const uint8_t* data, size_t size);
// Turns an image of *height x *width x channels (1 or 3, HWC) upright for an EXIF orientation
// (2..8, as exif_transpose: 2 mirror left-right, 3 turn 180, 4 mirror top-bottom, 5 transpose,
// 6 turn 90 clockwise, 7 transverse, 8 turn 90 anticlockwise; others: unchanged). 5..8 swap
// *height and *width. scratch: a buffer whose capacity is reused (it gets the old pixels).
void orient_pixels(int orientation, std::vector<uint8_t>& pixels, int64_t* height, int64_t* width,
                   int channels, std::vector<uint8_t>& scratch);

// Decodes JPEG/PNG (one per thread). Each image decodes as with a fresh decoder, whatever came
// before it. Images come out upright: an EXIF orientation (JPEG APP1, PNG eXIf) is applied, as
// Pillow's exif_transpose, OpenCV's imread and Ultralytics do, so the width and height are the
// upright ones (label files and COCO sizes are written against those).
class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;
  // Decodes into out (resized). min_side > 0: a JPEG is decoded at the smallest of libjpeg's DCT
  // scales n/8 whose shorter side is still at least min_side (PNGs at full size; a turn keeps the
  // shorter side, so the scale is the upright image's too). Returns "" on success, else the
  // reason (no throw).
  std::string decode(const uint8_t* data, size_t size, Image& out, int64_t min_side = 0);
  // A class mask: an 8-bit (or 1/2/4-bit) gray or palette PNG whose values (palette indices, not
  // colours) are the classes, into pixels (height * width bytes, one per pixel). RGB masks,
  // 16-bit masks and JPEGs are refused (the reason says what to save instead). An eXIf
  // orientation turns the mask as it would its image.
  std::string decode_mask(const uint8_t* data, size_t size, std::vector<uint8_t>& pixels,
                          int64_t* height, int64_t* width);

 private:
  struct Jpeg;
  std::unique_ptr<Jpeg> jpeg_;
  std::vector<uint8_t> turned_;  // orient_pixels' scratch
};

}  // namespace hpcnet::data::detail
