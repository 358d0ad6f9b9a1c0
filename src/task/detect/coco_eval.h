// The detection metric: pycocotools' COCOeval(iouType="bbox") (its 12 summarize() numbers and the
// per-class AP50 and AP50-95) and Ultralytics-style per-class P and R, from ground truths and
// detections in pixels. Plain host code: it holds the boxes and computes everything in summarize().
//
// Invariants: every detection is on a known image (one added with add_image or carrying a ground
// truth); boxes are finite with w, h >= 0; ids fit a double exactly (|id| <= 2^53), so serialize()
// loses nothing. Insertion order is kept: it decides ties (equal scores, equal IoUs) as
// pycocotools'.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

namespace hpcnet::task::detect {

// A box in pixels: top-left corner (x, y), width w and height h (COCO's "bbox": [x, y, w, h]).
struct CocoBox {
  double x = 0, y = 0, w = 0, h = 0;
};

struct CocoGroundTruth {
  int64_t image_id = 0;
  int64_t category_id = 0;
  CocoBox box;
  // COCO's "area" (the segment's area in COCO's own files): it decides the area range (small,
  // medium, large); IoU always uses the box. Empty: box.w * box.h.
  std::optional<double> area;
  // A crowd region: never a false negative; detections matched to it are ignored, and it can match
  // any number of them, with IoU = intersection / detection area.
  bool iscrowd = false;
};

struct CocoDetection {
  int64_t image_id = 0;
  int64_t category_id = 0;
  CocoBox box;
  double score = 0;  // confidence; higher first, equal scores keep insertion order
};

// The 12 numbers of COCOeval.summarize() for boxes, in its order (COCOeval.stats).
inline constexpr int kCocoStatCount = 12;
enum CocoStat : int {
  kCocoStatAp = 0,    // AP  @[IoU=0.50:0.95 | area=all    | maxDets=100]
  kCocoStatAp50,      // AP  @[IoU=0.50      | area=all    | maxDets=100]
  kCocoStatAp75,      // AP  @[IoU=0.75      | area=all    | maxDets=100]
  kCocoStatApSmall,   // AP  @[IoU=0.50:0.95 | area=small  | maxDets=100]
  kCocoStatApMedium,  // AP  @[IoU=0.50:0.95 | area=medium | maxDets=100]
  kCocoStatApLarge,   // AP  @[IoU=0.50:0.95 | area=large  | maxDets=100]
  kCocoStatAr1,       // AR  @[IoU=0.50:0.95 | area=all    | maxDets=1]
  kCocoStatAr10,      // AR  @[IoU=0.50:0.95 | area=all    | maxDets=10]
  kCocoStatAr100,     // AR  @[IoU=0.50:0.95 | area=all    | maxDets=100]
  kCocoStatArSmall,   // AR  @[IoU=0.50:0.95 | area=small  | maxDets=100]
  kCocoStatArMedium,  // AR  @[IoU=0.50:0.95 | area=medium | maxDets=100]
  kCocoStatArLarge,   // AR  @[IoU=0.50:0.95 | area=large  | maxDets=100]
};
// Short names of the stats, as metrics-log keys: "AP", "AP50", "AP75", "APs", "APm", "APl",
// "AR1", "AR10", "AR100", "ARs", "ARm", "ARl".
extern const std::array<const char*, kCocoStatCount> kCocoStatNames;

// What summarize() returns. Per-class arrays are (K), in category_ids order; -1 means "no
// ground truth" (COCOeval's convention), for the stats too (a stat whose every class is -1).
struct CocoSummary {
  std::array<double, kCocoStatCount> stats{};  // COCOeval.stats
  std::vector<int64_t> category_ids;           // (K) ascending
  std::vector<int64_t> instances;              // (K) non-crowd ground truths
  std::vector<int64_t> images;                 // (K) images with a non-crowd ground truth
  std::vector<double> ap50;                    // (K) COCO AP at IoU 0.5, area all, maxDets 100
  std::vector<double> ap50_95;                 // (K) COCO AP at IoU 0.50:0.95, same
  // (K) Ultralytics' ap_per_class P and R at IoU 0.5: at the confidence where its smoothed
  // mean-over-classes F1 curve peaks (see coco_eval.cpp); -1 without ground truth.
  std::vector<double> precision;
  std::vector<double> recall;
  double mean_precision = 0;  // mean of precision over the classes with ground truth (0 if none)
  double mean_recall = 0;     // the same for recall
  int f1_index = 0;           // index into linspace(0, 1, 1000) of that confidence
  double f1_confidence = 0;   // the confidence itself, f1_index / 999
};

// Accumulates ground truths and detections and evaluates them as COCOeval(iouType="bbox") with
// its default parameters: IoU thresholds np.linspace(.5, .95, 10), 101 recall points, area ranges
// all [0, 1e10], small [0, 32^2], medium [32^2, 96^2], large [96^2, 1e10] (both ends inclusive),
// maxDets 1, 10, 100. The images are every image added (gt-less ones through add_image); the
// categories are those given to the constructor, or else every category of a ground truth or a
// detection. Categories without ground truth do not count in the means (-1).
//
// Distributed evaluation: COCOeval needs every detection, so its state cannot be summed across
// ranks. Instead each rank serialize()s its evaluator to a flat vector<double> (exact: ids are
// < 2^53, coordinates are doubles), the vectors are gathered (all-gather of the lengths, then of
// the data, or a gather to rank 0), and one evaluator merge()s the others' vectors and calls
// summarize(). Merging in rank order gives the same result on every rank and the same result as
// one evaluator fed everything: an image's boxes stay together, in their order, and images are
// sorted by id before evaluating. An image that more than one rank evaluated (DistributedSampler
// repeats samples to pad the last batch) is kept once, from the first evaluator that had it, as
// torchvision's distributed COCO evaluation does.
class CocoEvaluator {
 public:
  // Categories: every category seen in a ground truth or a detection.
  CocoEvaluator() = default;
  // Exactly these categories (any order, no repeats): a box of another category is an InputError,
  // and a category without any box still gets its (-1) row in the per-class arrays.
  explicit CocoEvaluator(std::vector<int64_t> category_ids);

  // Registers an image (COCO's "images" list); needed for images without ground truth. Adding a
  // known image again does nothing.
  void add_image(int64_t image_id);
  // Registers gt.image_id and adds the ground truth. Throws InputError for a negative or
  // non-finite box or area, an id beyond 2^53, or a category outside the constructor's list.
  void add_ground_truth(const CocoGroundTruth& gt);
  // Adds a detection. Throws InputError, besides as add_ground_truth, for an unknown image or a
  // non-finite score.
  void add_detection(const CocoDetection& det);
  // One image at once: registers image_id, then adds gts and dets (each must be on image_id).
  void add_image(int64_t image_id, std::span<const CocoGroundTruth> gts,
                 std::span<const CocoDetection> dets);

  // The flat state, for gathering across ranks (layout in coco_eval.cpp).
  std::vector<double> serialize() const;
  // Adds the images (those not already here), ground truths and detections of a serialize()d
  // evaluator. Throws InputError for a vector serialize() did not write (or of another version) or
  // from an evaluator with another category list; on a throw nothing was added.
  void merge(std::span<const double> state);

  // Evaluates everything added so far (costs O(N log N) in boxes, plus COCOeval's matching, which
  // is per image and category). Does not change the evaluator.
  CocoSummary summarize() const;

  size_t num_images() const { return image_list_.size(); }
  const std::vector<CocoGroundTruth>& ground_truths() const { return gts_; }  // area filled in
  const std::vector<CocoDetection>& detections() const { return dets_; }

 private:
  void check_category(int64_t category_id, const char* what) const;

  bool fixed_categories_ = false;
  std::vector<int64_t> categories_;  // ascending, when fixed_categories_
  std::unordered_set<int64_t> images_;
  std::vector<int64_t> image_list_;  // insertion order
  std::vector<CocoGroundTruth> gts_;
  std::vector<CocoDetection> dets_;
};

// IoU thresholds and recall points, bit-identical to pycocotools' Params (np.linspace): (10) and
// (101). Note the 9th threshold is 0.8999999999999999, not 0.9.
std::array<double, 10> coco_iou_thresholds();
std::array<double, 101> coco_recall_thresholds();

// pycocotools' IoU of two boxes (maskApi.c bbIou): 0 unless they overlap with positive width and
// height; crowd: intersection / area of det.
double coco_box_iou(const CocoBox& det, const CocoBox& gt, bool crowd);

// A COCO results list: [{"image_id", "category_id", "bbox": [x, y, w, h], "score"}, ...], in the
// given order, at full double precision (so pycocotools' loadRes of it evaluates to exactly the
// numbers summarize() gives).
nlohmann::json coco_results_json(std::span<const CocoDetection> dets);
// Writes coco_results_json(dets) to path (atomically, see write_file_atomic).
void write_coco_results(const std::string& path, std::span<const CocoDetection> dets);

// The 12 lines COCOeval.summarize() prints, e.g.
// " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.421".
std::string coco_summary_text(const CocoSummary& s);

}  // namespace hpcnet::task::detect
