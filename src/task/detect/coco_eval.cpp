// COCOeval(iouType="bbox") re-implemented step by step from pycocotools 2.0 (cocoeval.py:
// evaluate, evaluateImg, accumulate, summarize; maskApi.c: bbIou), and the P/R part of Ultralytics'
// ap_per_class (ultralytics/utils/metrics.py) on COCOeval's matches. Each step names the Python
// it mirrors; tests/test_coco_eval.cpp checks the results against pycocotools to 1e-6.
#include "src/task/detect/coco_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "hpcnet/error.h"
#include "hpcnet/io.h"

namespace hpcnet::task::detect {

const std::array<const char*, kCocoStatCount> kCocoStatNames = {
    "AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};

namespace {

constexpr int kT = 10;   // IoU thresholds
constexpr int kR = 101;  // recall points
constexpr int kA = 4;    // area ranges: all, small, medium, large
constexpr int kM = 3;    // maxDets
constexpr int kMaxDets[kM] = {1, 10, 100};
// Params.areaRng: [0**2, 1e5**2], [0**2, 32**2], [32**2, 96**2], [96**2, 1e5**2]; a gt or
// detection is outside when area < lo or area > hi (both ends belong to the range).
constexpr double kAreaRng[kA][2] = {{0, 1e10}, {0, 1024}, {1024, 9216}, {9216, 1e10}};
constexpr double kMaxId = 9007199254740992.0;  // 2^53: every integer up to it is a double
constexpr int kPx = 1000;                      // Ultralytics' confidence grid linspace(0, 1, 1000)

// serialize(): magic ("COCO" as the bytes of an int), layout version.
constexpr double kStateMagic = 0x434F434F;
constexpr double kStateVersion = 1;
constexpr int kGtFields = 8;   // image, category, x, y, w, h, area, iscrowd
constexpr int kDetFields = 7;  // image, category, x, y, w, h, score

// x as a stored double: keeps the compiler from fusing the product that made x into a following
// add (an FMA rounds once, not twice), which pycocotools' and numpy's builds do not do, so the
// results stay bit-identical to theirs where a comparison (IoU >= threshold) could flip.
inline double rounded(double x) {
  volatile double v = x;
  return v;
}

// np.linspace(start, stop, N): step = (stop - start) / (N - 1); y = arange(N) * step + start;
// y[-1] = stop.
template <size_t N>
std::array<double, N> np_linspace(double start, double stop) {
  std::array<double, N> y{};
  const double step = (stop - start) / static_cast<double>(N - 1);
  for (size_t k = 0; k < N; ++k) y[k] = rounded(static_cast<double>(k) * step) + start;
  y[N - 1] = stop;
  return y;
}

// np.interp(x, xp, fp, left=left) (right = fp[-1]) for xp ascending, possibly with repeats, as
// numpy's arr_interp: j = the last index with xp[j] <= x (binary_search_with_guess); at an xp value
// or the last point, fp[j]; else slope * (x - xp[j]) + fp[j].
double np_interp(double x, const std::vector<double>& xp, const std::vector<double>& fp,
                 double left) {
  const size_t n = xp.size();
  if (x > xp[n - 1]) return fp[n - 1];
  if (x < xp[0]) return left;
  const size_t j = static_cast<size_t>(std::upper_bound(xp.begin(), xp.end(), x) - xp.begin()) - 1;
  if (j == n - 1 || xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  return rounded(slope * (x - xp[j])) + fp[j];
}

std::string box_str(const CocoBox& b) {
  return fmt::format("[{}, {}, {}, {}]", b.x, b.y, b.w, b.h);
}

void check_id(double id, const char* what, const char* field) {
  HPCNET_REQUIRE(std::abs(id) <= kMaxId,
                 fmt::format("coco_eval: {} has {} {}, beyond 2^53 (ids must be exact doubles for "
                             "serialize()); renumber it",
                             what, field, id));
}

void check_box(const CocoBox& b, int64_t image_id, int64_t category_id, const char* what) {
  const bool ok = std::isfinite(b.x) && std::isfinite(b.y) && std::isfinite(b.w) &&
                  std::isfinite(b.h) && b.w >= 0 && b.h >= 0;
  HPCNET_REQUIRE(ok, fmt::format("coco_eval: {} on image {} (category {}) has box [x, y, w, h] = "
                                 "{}: coordinates must be finite and w, h >= 0 (pixels, xywh)",
                                 what, image_id, category_id, box_str(b)));
}

// A detection or ground truth in one (image, category) of the evaluation.
struct DetRecord {
  double score;
  int32_t rank;          // its place among its image and category's detections by score, < 100
  uint16_t matched[kA];  // bit t: dtMatches[t] != 0 for area range a
  uint16_t ignored[kA];  // bit t: dtIgnore[t] for area range a
};

}  // namespace

std::array<double, 10> coco_iou_thresholds() { return np_linspace<10>(0.5, 0.95); }
std::array<double, 101> coco_recall_thresholds() { return np_linspace<101>(0.0, 1.0); }

// maskApi.c bbIou: ga = G[2]*G[3]; da = D[2]*D[3]; w = fmin(D[2]+D[0], G[2]+G[0]) - fmax(D[0],
// G[0]), 0 unless > 0; h the same; i = w*h; u = crowd ? da : da+ga-i; iou = i/u.
double coco_box_iou(const CocoBox& det, const CocoBox& gt, bool crowd) {
  const double ga = rounded(gt.w * gt.h);
  const double da = rounded(det.w * det.h);
  const double w = std::fmin(det.w + det.x, gt.w + gt.x) - std::fmax(det.x, gt.x);
  if (w <= 0) return 0;
  const double h = std::fmin(det.h + det.y, gt.h + gt.y) - std::fmax(det.y, gt.y);
  if (h <= 0) return 0;
  const double i = rounded(w * h);
  const double u = crowd ? da : da + ga - i;
  return i / u;
}

// ---- adding boxes ------------------------------------------------------------------------------

CocoEvaluator::CocoEvaluator(std::vector<int64_t> category_ids) : fixed_categories_(true) {
  for (int64_t c : category_ids) check_id(static_cast<double>(c), "the category list", "id");
  std::sort(category_ids.begin(), category_ids.end());
  const auto dup = std::adjacent_find(category_ids.begin(), category_ids.end());
  HPCNET_REQUIRE(dup == category_ids.end(),
                 fmt::format("CocoEvaluator: category {} is listed twice; list each once", *dup));
  categories_ = std::move(category_ids);
}

void CocoEvaluator::check_category(int64_t category_id, const char* what) const {
  check_id(static_cast<double>(category_id), what, "category_id");
  if (!fixed_categories_) return;
  HPCNET_REQUIRE(std::binary_search(categories_.begin(), categories_.end(), category_id),
                 fmt::format("coco_eval: {} has category {}, which is not among the evaluator's "
                             "{} categories; pass it to the CocoEvaluator constructor or drop it",
                             what, category_id, categories_.size()));
}

void CocoEvaluator::add_image(int64_t image_id) {
  check_id(static_cast<double>(image_id), "an image", "image_id");
  if (images_.insert(image_id).second) image_list_.push_back(image_id);
}

void CocoEvaluator::add_ground_truth(const CocoGroundTruth& gt) {
  check_id(static_cast<double>(gt.image_id), "a ground truth", "image_id");
  check_category(gt.category_id, "a ground truth");
  check_box(gt.box, gt.image_id, gt.category_id, "a ground truth");
  CocoGroundTruth g = gt;
  g.area = gt.area.value_or(gt.box.w * gt.box.h);  // COCO's gt "area"
  HPCNET_REQUIRE(std::isfinite(*g.area) && *g.area >= 0,
                 fmt::format("coco_eval: a ground truth on image {} (category {}) has area {}: it "
                             "must be finite and >= 0 (leave it empty for w * h)",
                             gt.image_id, gt.category_id, *g.area));
  add_image(gt.image_id);
  gts_.push_back(g);
}

void CocoEvaluator::add_detection(const CocoDetection& det) {
  check_id(static_cast<double>(det.image_id), "a detection", "image_id");
  check_category(det.category_id, "a detection");
  check_box(det.box, det.image_id, det.category_id, "a detection");
  HPCNET_REQUIRE(std::isfinite(det.score),
                 fmt::format("coco_eval: a detection on image {} (category {}) has score {}: "
                             "scores must be finite",
                             det.image_id, det.category_id, det.score));
  // pycocotools' loadRes: "Results do not correspond to current coco set".
  HPCNET_REQUIRE(images_.count(det.image_id) != 0,
                 fmt::format("coco_eval: a detection is on image {}, which the evaluator does not "
                             "know; add_image() every evaluated image (those without ground truth "
                             "too) before its detections",
                             det.image_id));
  dets_.push_back(det);
}

void CocoEvaluator::add_image(int64_t image_id, std::span<const CocoGroundTruth> gts,
                              std::span<const CocoDetection> dets) {
  for (const auto& g : gts)
    HPCNET_REQUIRE(g.image_id == image_id,
                   fmt::format("CocoEvaluator::add_image({}): a ground truth is on image {}; "
                               "every box passed must be on image {}",
                               image_id, g.image_id, image_id));
  for (const auto& d : dets)
    HPCNET_REQUIRE(d.image_id == image_id,
                   fmt::format("CocoEvaluator::add_image({}): a detection is on image {}; every "
                               "box passed must be on image {}",
                               image_id, d.image_id, image_id));
  add_image(image_id);
  for (const auto& g : gts) add_ground_truth(g);
  for (const auto& d : dets) add_detection(d);
}

// ---- serialize / merge -------------------------------------------------------------------------
//
// Layout of the vector (all doubles; ids and counts are integers):
//   magic 0x434F434F, version 1,
//   fixed (1 when the constructor listed the categories, else 0), K, K category ids,
//   I, I image ids (in the order they were added),
//   G, G x [image_id, category_id, x, y, w, h, area, iscrowd (0/1)],
//   D, D x [image_id, category_id, x, y, w, h, score].

std::vector<double> CocoEvaluator::serialize() const {
  std::vector<double> s;
  s.reserve(6 + categories_.size() + image_list_.size() + kGtFields * gts_.size() +
            kDetFields * dets_.size());
  s.push_back(kStateMagic);
  s.push_back(kStateVersion);
  s.push_back(fixed_categories_ ? 1 : 0);
  s.push_back(static_cast<double>(categories_.size()));
  for (int64_t c : categories_) s.push_back(static_cast<double>(c));
  s.push_back(static_cast<double>(image_list_.size()));
  for (int64_t i : image_list_) s.push_back(static_cast<double>(i));
  s.push_back(static_cast<double>(gts_.size()));
  for (const auto& g : gts_) {
    const double f[kGtFields] = {static_cast<double>(g.image_id),
                                 static_cast<double>(g.category_id),
                                 g.box.x,
                                 g.box.y,
                                 g.box.w,
                                 g.box.h,
                                 *g.area,
                                 g.iscrowd ? 1.0 : 0.0};
    s.insert(s.end(), f, f + kGtFields);
  }
  s.push_back(static_cast<double>(dets_.size()));
  for (const auto& d : dets_) {
    const double f[kDetFields] = {static_cast<double>(d.image_id),
                                  static_cast<double>(d.category_id),
                                  d.box.x,
                                  d.box.y,
                                  d.box.w,
                                  d.box.h,
                                  d.score};
    s.insert(s.end(), f, f + kDetFields);
  }
  return s;
}

void CocoEvaluator::merge(std::span<const double> state) {
  size_t pos = 0;
  auto fail = [&](const std::string& why) {
    throw InputError(
        fmt::format("CocoEvaluator::merge: {} (at element {} of {}); pass a vector "
                    "that CocoEvaluator::serialize() wrote, unchanged",
                    why, pos, state.size()));
  };
  auto next = [&]() -> double {
    if (pos >= state.size()) fail("the vector ends early");
    return state[pos++];
  };
  auto next_int = [&](const char* what) -> int64_t {
    const double v = next();
    if (!(std::abs(v) <= kMaxId) || v != std::floor(v))
      fail(fmt::format("{} {} is not an integer", what, v));
    return static_cast<int64_t>(v);
  };
  auto next_count = [&](const char* what, size_t fields) -> size_t {
    const int64_t n = next_int(what);
    if (n < 0 || static_cast<uint64_t>(n) > (state.size() - pos) / fields)
      fail(fmt::format("{} {} does not fit the vector", what, n));
    return static_cast<size_t>(n);
  };
  if (next() != kStateMagic) fail("it does not start with the serialize() marker");
  const double version = next();
  if (version != kStateVersion)
    fail(fmt::format("it is layout version {}, this build reads version {}", version,
                     kStateVersion));
  const double fixed = next();
  if (fixed != 0 && fixed != 1) fail("the category flag is not 0 or 1");
  std::vector<int64_t> cats(next_count("the category count", 1));
  for (auto& c : cats) c = next_int("a category id");
  if ((fixed == 1) != fixed_categories_ || (fixed_categories_ && cats != categories_))
    throw InputError("CocoEvaluator::merge: the other evaluator has another category list (" +
                     (fixed == 1 ? std::to_string(cats.size()) + " categories given"
                                 : std::string("none given")) +
                     ", here " +
                     (fixed_categories_ ? std::to_string(categories_.size()) + " given"
                                        : std::string("none given")) +
                     "); construct every rank's evaluator the same way");
  std::vector<int64_t> imgs(next_count("the image count", 1));
  std::unordered_set<int64_t> their_images;
  for (auto& i : imgs) {
    i = next_int("an image id");
    their_images.insert(i);
  }
  std::vector<CocoGroundTruth> gts(next_count("the ground-truth count", kGtFields));
  for (auto& g : gts) {
    g.image_id = next_int("an image id");
    g.category_id = next_int("a category id");
    g.box = {next(), next(), next(), next()};
    g.area = next();
    const double crowd = next();
    if (crowd != 0 && crowd != 1) fail("an iscrowd flag is not 0 or 1");
    g.iscrowd = crowd == 1;
    if (!their_images.count(g.image_id)) fail("a ground truth is on an image it does not list");
  }
  std::vector<CocoDetection> dets(next_count("the detection count", kDetFields));
  for (auto& d : dets) {
    d.image_id = next_int("an image id");
    d.category_id = next_int("a category id");
    d.box = {next(), next(), next(), next()};
    d.score = next();
    if (!their_images.count(d.image_id)) fail("a detection is on an image it does not list");
  }
  if (pos != state.size()) fail("elements follow the last detection");
  // Validate everything before adding anything.
  for (const auto& g : gts) {
    check_category(g.category_id, "a merged ground truth");
    check_box(g.box, g.image_id, g.category_id, "a merged ground truth");
    if (!(std::isfinite(*g.area) && *g.area >= 0))
      fail("a ground-truth area is negative or not finite");
  }
  for (const auto& d : dets) {
    check_category(d.category_id, "a merged detection");
    check_box(d.box, d.image_id, d.category_id, "a merged detection");
    if (!std::isfinite(d.score)) fail("a detection score is not finite");
  }
  std::unordered_set<int64_t> fresh;  // their images that are new here; the others are skipped
  for (int64_t i : imgs)
    if (!images_.count(i)) fresh.insert(i);
  for (int64_t i : imgs)
    if (fresh.count(i)) add_image(i);
  for (const auto& g : gts)
    if (fresh.count(g.image_id)) gts_.push_back(g);
  for (const auto& d : dets)
    if (fresh.count(d.image_id)) dets_.push_back(d);
}

// ---- evaluation --------------------------------------------------------------------------------

namespace {

// COCOeval.__init__/evaluate and _prepare: imgIds = sorted unique image ids, catIds = sorted
// categories; boxes grouped by (category, image) in (category, image) order, each group in
// insertion order (the order of cocoGt.imgToAnns): a stable sort by the key k * I + i.
struct Prepared {
  std::vector<int64_t> images, cats;  // (I), (K) ascending
  std::vector<uint64_t> gt_key, det_key;
  std::vector<uint32_t> gt_order, det_order;
  size_t num_images() const { return images.size(); }
  size_t num_cats() const { return cats.size(); }
};

Prepared prepare(const std::vector<int64_t>& image_list, const std::vector<int64_t>& categories,
                 bool fixed_categories, const std::vector<CocoGroundTruth>& gts,
                 const std::vector<CocoDetection>& dets) {
  Prepared p;
  p.images = image_list;
  std::sort(p.images.begin(), p.images.end());
  p.cats = categories;
  if (!fixed_categories) {
    for (const auto& g : gts) p.cats.push_back(g.category_id);
    for (const auto& d : dets) p.cats.push_back(d.category_id);
    std::sort(p.cats.begin(), p.cats.end());
    p.cats.erase(std::unique(p.cats.begin(), p.cats.end()), p.cats.end());
  }
  const size_t I = p.num_images(), K = p.num_cats();
  std::unordered_map<int64_t, uint64_t> image_index, cat_index;
  image_index.reserve(I);
  cat_index.reserve(K);
  for (size_t i = 0; i < I; ++i) image_index[p.images[i]] = i;
  for (size_t k = 0; k < K; ++k) cat_index[p.cats[k]] = k;
  auto grouped = [&](const auto& boxes, std::vector<uint64_t>& key) {
    key.resize(boxes.size());
    for (size_t n = 0; n < boxes.size(); ++n)
      key[n] = cat_index.at(boxes[n].category_id) * I + image_index.at(boxes[n].image_id);
    std::vector<uint32_t> order(boxes.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
    return order;
  };
  p.gt_order = grouped(gts, p.gt_key);
  p.det_order = grouped(dets, p.det_key);
  return p;
}

// What evaluateImg finds, per category.
struct Matches {
  explicit Matches(size_t K) : npig(K * kA, 0), instances(K, 0), images_with(K, 0), records(K) {}
  std::vector<int64_t> npig;  // non-ignored gts per (category, area range)
  std::vector<int64_t> instances, images_with;
  std::vector<std::vector<DetRecord>> records;  // per category: evalImgs' detections, image order
};

// One (image, category) group: its gts (insertion order) and detections (by score, at most
// maxDets[-1]), with the IoUs between them. The vectors are reused from group to group.
struct ImageGroup {
  std::vector<uint32_t> g_idx, d_idx, g_sorted;
  std::vector<double> ious;  // (D, G)
  std::vector<uint8_t> g_ignore;
  std::vector<uint16_t> g_matched;
};

// evaluateImg's matching in area range a, every IoU threshold, into the group's records rec.
void match_in_area(int a, ImageGroup& grp, DetRecord* rec, const std::array<double, kT>& iou_thrs,
                   const std::vector<CocoGroundTruth>& gts, const std::vector<CocoDetection>& dets,
                   int64_t& npig) {
  const size_t G = grp.g_idx.size(), D = grp.d_idx.size();
  const double lo = kAreaRng[a][0], hi = kAreaRng[a][1];
  // g['_ignore'] = g['ignore'] (= iscrowd) or area outside aRng
  grp.g_ignore.resize(G);
  for (size_t g = 0; g < G; ++g) {
    const CocoGroundTruth& gt = gts[grp.g_idx[g]];
    grp.g_ignore[g] = gt.iscrowd || *gt.area < lo || *gt.area > hi;
  }
  // gtind = np.argsort(_ignore, kind='mergesort'): non-ignored first, each in order.
  grp.g_sorted.resize(G);
  std::iota(grp.g_sorted.begin(), grp.g_sorted.end(), 0u);
  std::stable_partition(grp.g_sorted.begin(), grp.g_sorted.end(),
                        [&](uint32_t g) { return !grp.g_ignore[g]; });
  for (size_t g = 0; g < G; ++g) npig += grp.g_ignore[g] ? 0 : 1;

  grp.g_matched.assign(G, 0);
  if (D > 0 && G > 0) {
    for (int t = 0; t < kT; ++t) {
      const uint16_t bit = static_cast<uint16_t>(1u << t);
      for (size_t d = 0; d < D; ++d) {
        double iou = std::min(iou_thrs[t], 1 - 1e-10);
        int64_t m = -1;  // index into g_sorted
        for (size_t s = 0; s < G; ++s) {
          const uint32_t g = grp.g_sorted[s];
          // already matched and not a crowd: next gt
          if ((grp.g_matched[g] & bit) && !gts[grp.g_idx[g]].iscrowd) continue;
          // matched to a regular gt and reached the ignored ones: stop
          if (m > -1 && !grp.g_ignore[grp.g_sorted[m]] && grp.g_ignore[g]) break;
          // a worse match: next gt (an equal IoU moves the match to the later gt)
          if (grp.ious[d * G + g] < iou) continue;
          iou = grp.ious[d * G + g];
          m = static_cast<int64_t>(s);
        }
        if (m == -1) continue;
        const uint32_t g = grp.g_sorted[m];
        if (grp.g_ignore[g]) rec[d].ignored[a] |= bit;
        rec[d].matched[a] |= bit;
        grp.g_matched[g] |= bit;
      }
    }
  }
  // unmatched detections outside the area range are ignored (dt area = w * h, as loadRes)
  for (size_t d = 0; d < D; ++d) {
    const CocoBox& b = dets[grp.d_idx[d]].box;
    const double area = b.w * b.h;
    if (area < lo || area > hi)
      rec[d].ignored[a] |= static_cast<uint16_t>(~rec[d].matched[a] & 0x3FF);
  }
}

// evaluateImg for one (image, category) of category k, all four area ranges, maxDet 100.
void evaluate_image(size_t k, ImageGroup& grp, const std::array<double, kT>& iou_thrs,
                    const std::vector<CocoGroundTruth>& gts, const std::vector<CocoDetection>& dets,
                    Matches& out) {
  // dtind = np.argsort([-d['score'] for d in dt], kind='mergesort'); dt = dt[:maxDets[-1]]
  std::stable_sort(grp.d_idx.begin(), grp.d_idx.end(),
                   [&](uint32_t a, uint32_t b) { return dets[a].score > dets[b].score; });
  if (grp.d_idx.size() > static_cast<size_t>(kMaxDets[kM - 1])) grp.d_idx.resize(kMaxDets[kM - 1]);
  const size_t G = grp.g_idx.size(), D = grp.d_idx.size();

  int64_t non_crowd = 0;
  for (uint32_t g : grp.g_idx) non_crowd += gts[g].iscrowd ? 0 : 1;
  out.instances[k] += non_crowd;
  out.images_with[k] += non_crowd > 0 ? 1 : 0;

  // computeIoU: (D, G), gts in insertion order.
  grp.ious.assign(D * G, 0.0);
  for (size_t d = 0; d < D; ++d)
    for (size_t g = 0; g < G; ++g)
      grp.ious[d * G + g] =
          coco_box_iou(dets[grp.d_idx[d]].box, gts[grp.g_idx[g]].box, gts[grp.g_idx[g]].iscrowd);

  std::vector<DetRecord>& records = out.records[k];
  const size_t first = records.size();
  for (size_t d = 0; d < D; ++d)
    records.push_back({dets[grp.d_idx[d]].score, static_cast<int32_t>(d), {}, {}});
  DetRecord* rec = records.data() + first;
  for (int a = 0; a < kA; ++a)
    match_in_area(a, grp, rec, iou_thrs, gts, dets, out.npig[k * kA + a]);
}

// evaluate: evaluateImg over every (category, image) group, in that order.
Matches evaluate_images(const Prepared& p, const std::vector<CocoGroundTruth>& gts,
                        const std::vector<CocoDetection>& dets) {
  const std::array<double, kT> iou_thrs = coco_iou_thresholds();
  const size_t I = p.num_images();
  Matches out(p.num_cats());
  ImageGroup grp;
  size_t gp = 0, dp = 0;
  while (gp < p.gt_order.size() || dp < p.det_order.size()) {
    const uint64_t key =
        std::min(gp < p.gt_order.size() ? p.gt_key[p.gt_order[gp]] : UINT64_MAX,
                 dp < p.det_order.size() ? p.det_key[p.det_order[dp]] : UINT64_MAX);
    grp.g_idx.clear();
    grp.d_idx.clear();
    while (gp < p.gt_order.size() && p.gt_key[p.gt_order[gp]] == key)
      grp.g_idx.push_back(p.gt_order[gp++]);
    while (dp < p.det_order.size() && p.det_key[p.det_order[dp]] == key)
      grp.d_idx.push_back(p.det_order[dp++]);
    evaluate_image(key / I, grp, iou_thrs, gts, dets, out);
  }
  return out;
}

// accumulate's precision [k][a][m][t][r] and recall [k][a][m][t]; -1 where a category has no
// ground truth in that area range.
struct Accumulated {
  explicit Accumulated(size_t K_in)
      : K(K_in), precision(K_in * kA * kM * kT * kR, -1.0), recall(K_in * kA * kM * kT, -1.0) {}
  double* P(size_t k, int a, int m, int t) {
    return &precision[(((k * kA + a) * kM + m) * kT + t) * kR];
  }
  const double* P(size_t k, int a, int m, int t) const {
    return &precision[(((k * kA + a) * kM + m) * kT + t) * kR];
  }
  double& Rc(size_t k, int a, int m, int t) { return recall[((k * kA + a) * kM + m) * kT + t]; }
  double Rc(size_t k, int a, int m, int t) const {
    return recall[((k * kA + a) * kM + m) * kT + t];
  }
  size_t K;
  std::vector<double> precision, recall;
};

// accumulate: per category, detections of all images (concatenated in image order) sorted by
// np.argsort(-dtScores, kind='mergesort'); one stable sort serves every area and maxDet, since
// keeping those of rank < maxDet from a stably sorted list is the stable sort of the kept ones.
// The records are left sorted.
Accumulated accumulate(Matches& matches) {
  const std::array<double, kR> rec_thrs = coco_recall_thresholds();
  const size_t K = matches.records.size();
  Accumulated acc(K);
  std::vector<double> rc, pr;
  for (size_t k = 0; k < K; ++k) {
    std::vector<DetRecord>& recs = matches.records[k];
    std::stable_sort(recs.begin(), recs.end(),
                     [](const DetRecord& x, const DetRecord& y) { return x.score > y.score; });
    for (int a = 0; a < kA; ++a) {
      const int64_t n_gt = matches.npig[k * kA + a];
      if (n_gt == 0) continue;  // precision and recall stay -1
      for (int m = 0; m < kM; ++m) {
        for (int t = 0; t < kT; ++t) {
          const uint16_t bit = static_cast<uint16_t>(1u << t);
          rc.clear();
          pr.clear();
          double tp = 0, fp = 0;
          for (const DetRecord& r : recs) {
            if (r.rank >= kMaxDets[m]) continue;
            const bool ig = r.ignored[a] & bit, mt = r.matched[a] & bit;
            tp += (mt && !ig) ? 1 : 0;
            fp += (!mt && !ig) ? 1 : 0;
            rc.push_back(tp / static_cast<double>(n_gt));
            pr.push_back(tp / (fp + tp + 2.220446049250313e-16));  // np.spacing(1)
          }
          const size_t nd = rc.size();
          acc.Rc(k, a, m, t) = nd ? rc.back() : 0.0;
          for (size_t i = nd; i-- > 1;)
            if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
          double* q = acc.P(k, a, m, t);
          for (int r = 0; r < kR; ++r) {  // np.searchsorted(rc, recThrs, side='left')
            const size_t pi = static_cast<size_t>(
                std::lower_bound(rc.begin(), rc.end(), rec_thrs[r]) - rc.begin());
            q[r] = pi < nd ? pr[pi] : 0.0;
          }
        }
      }
    }
  }
  return acc;
}

// summarize: the mean of the entries > -1 of the selection (IoU threshold t_only, or all with -1;
// category k_only, or all), -1 when there is none.
double mean_of(const Accumulated& acc, bool ap, int t_only, int a, int m, int64_t k_only = -1) {
  double sum = 0;
  int64_t n = 0;
  for (size_t k = 0; k < acc.K; ++k) {
    if (k_only >= 0 && static_cast<int64_t>(k) != k_only) continue;
    for (int t = 0; t < kT; ++t) {
      if (t_only >= 0 && t != t_only) continue;
      if (ap) {
        const double* q = acc.P(k, a, m, t);
        for (int r = 0; r < kR; ++r)
          if (q[r] > -1) sum += q[r], ++n;
      } else if (acc.Rc(k, a, m, t) > -1) {
        sum += acc.Rc(k, a, m, t), ++n;
      }
    }
  }
  return n ? sum / static_cast<double>(n) : -1.0;
}

// summarize: COCOeval.stats and the per-class AP50 and AP50-95.
void summarize_stats(const Accumulated& acc, CocoSummary& out) {
  out.stats[kCocoStatAp] = mean_of(acc, true, -1, 0, 2);
  out.stats[kCocoStatAp50] = mean_of(acc, true, 0, 0, 2);
  out.stats[kCocoStatAp75] = mean_of(acc, true, 5, 0, 2);  // iouThrs[5] == .75 exactly
  out.stats[kCocoStatApSmall] = mean_of(acc, true, -1, 1, 2);
  out.stats[kCocoStatApMedium] = mean_of(acc, true, -1, 2, 2);
  out.stats[kCocoStatApLarge] = mean_of(acc, true, -1, 3, 2);
  out.stats[kCocoStatAr1] = mean_of(acc, false, -1, 0, 0);
  out.stats[kCocoStatAr10] = mean_of(acc, false, -1, 0, 1);
  out.stats[kCocoStatAr100] = mean_of(acc, false, -1, 0, 2);
  out.stats[kCocoStatArSmall] = mean_of(acc, false, -1, 1, 2);
  out.stats[kCocoStatArMedium] = mean_of(acc, false, -1, 2, 2);
  out.stats[kCocoStatArLarge] = mean_of(acc, false, -1, 3, 2);
  out.ap50.resize(acc.K);
  out.ap50_95.resize(acc.K);
  for (size_t k = 0; k < acc.K; ++k) {
    out.ap50[k] = mean_of(acc, true, 0, 0, 2, static_cast<int64_t>(k));
    out.ap50_95[k] = mean_of(acc, true, -1, 0, 2, static_cast<int64_t>(k));
  }
}

// Ultralytics' ap_per_class at IoU 0.5 on COCOeval's matches (area all, maxDets 100; detections
// COCOeval ignores, those matched to a crowd gt, are left out), over the classes with non-crowd
// gts (n_l): recall = tpc / (n_l + 1e-16), precision = tpc / (tpc + fpc), both interpolated at
// px = linspace(0, 1, 1000) by np.interp(-px, -conf, ., left=0 / left=1); a class without
// predictions has zero curves. F1 = 2PR / (P + R + 1e-16); the mean over those classes is
// smoothed by smooth(y, 0.1) (a box filter of 101 points, the ends padded with the end values);
// P and R of each class are read at its first maximum. The records are accumulate()'s, sorted.
void ultralytics_precision_recall(const Matches& matches, CocoSummary& out) {
  const size_t K = matches.records.size();
  const std::array<double, kPx> px = np_linspace<kPx>(0.0, 1.0);
  std::vector<size_t> labelled;
  for (size_t k = 0; k < K; ++k)
    if (matches.instances[k] > 0) labelled.push_back(k);
  const size_t nc = labelled.size();
  std::vector<double> p_curve(nc * kPx, 0.0), r_curve(nc * kPx, 0.0);
  std::vector<double> xp, fr, fpr;
  for (size_t c = 0; c < nc; ++c) {
    const size_t k = labelled[c];
    xp.clear();
    fr.clear();
    fpr.clear();
    double tpc = 0, fpc = 0;
    const double n_l = static_cast<double>(matches.instances[k]);
    for (const DetRecord& r : matches.records[k]) {
      if (r.ignored[0] & 1u) continue;
      if (r.matched[0] & 1u)
        tpc += 1;
      else
        fpc += 1;
      xp.push_back(-r.score);
      fr.push_back(tpc / (n_l + 1e-16));
      fpr.push_back(tpc / (tpc + fpc));
    }
    if (xp.empty()) continue;
    for (int j = 0; j < kPx; ++j) {
      r_curve[c * kPx + j] = np_interp(-px[j], xp, fr, 0.0);
      p_curve[c * kPx + j] = np_interp(-px[j], xp, fpr, 1.0);
    }
  }
  out.precision.assign(K, -1.0);
  out.recall.assign(K, -1.0);
  if (nc == 0) return;
  std::array<double, kPx> f1_mean{};
  for (size_t c = 0; c < nc; ++c)
    for (int j = 0; j < kPx; ++j) {
      const double p = p_curve[c * kPx + j], r = r_curve[c * kPx + j];
      f1_mean[j] += 2 * p * r / (p + r + 1e-16);
    }
  for (double& f : f1_mean) f /= static_cast<double>(nc);
  // smooth(y, f=0.1): nf = round(1000 * 0.1 * 2) // 2 + 1 = 101; np.convolve(padded, ones/nf)
  constexpr int kNf = 101, kPad = kNf / 2;
  const double w = 1.0 / kNf;
  std::array<double, kPx + 2 * kPad> yp{};
  for (int j = 0; j < kPad; ++j) yp[j] = f1_mean[0], yp[kPad + kPx + j] = f1_mean[kPx - 1];
  for (int j = 0; j < kPx; ++j) yp[kPad + j] = f1_mean[j];
  int best = 0;
  double best_v = 0;
  for (int j = 0; j < kPx; ++j) {
    double s = 0;
    for (int i = 0; i < kNf; ++i) s += yp[j + i] * w;
    if (j == 0 || s > best_v) best = j, best_v = s;  // argmax: the first maximum
  }
  out.f1_index = best;
  out.f1_confidence = px[best];
  for (size_t c = 0; c < nc; ++c) {
    out.precision[labelled[c]] = p_curve[c * kPx + best];
    out.recall[labelled[c]] = r_curve[c * kPx + best];
    out.mean_precision += p_curve[c * kPx + best] / static_cast<double>(nc);
    out.mean_recall += r_curve[c * kPx + best] / static_cast<double>(nc);
  }
}

}  // namespace

// COCOeval's evaluate (prepare, evaluate_images), accumulate and summarize, then Ultralytics' P
// and R.
CocoSummary CocoEvaluator::summarize() const {
  const Prepared prepared = prepare(image_list_, categories_, fixed_categories_, gts_, dets_);
  Matches matches = evaluate_images(prepared, gts_, dets_);
  const Accumulated acc = accumulate(matches);
  CocoSummary out;
  summarize_stats(acc, out);
  out.category_ids = prepared.cats;
  out.instances = matches.instances;
  out.images = matches.images_with;
  ultralytics_precision_recall(matches, out);
  return out;
}

// ---- output ------------------------------------------------------------------------------------

nlohmann::json coco_results_json(std::span<const CocoDetection> dets) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : dets)
    out.push_back({{"image_id", d.image_id},
                   {"category_id", d.category_id},
                   {"bbox", {d.box.x, d.box.y, d.box.w, d.box.h}},
                   {"score", d.score}});
  return out;
}

void write_coco_results(const std::string& path, std::span<const CocoDetection> dets) {
  write_file_atomic(path, coco_results_json(dets).dump() + "\n");
}

std::string coco_summary_text(const CocoSummary& s) {
  // COCOeval.summarize's iStr: ' {:<18} {} @[ IoU={:<9} | area={:>6s} | maxDets={:>3d} ] = {:0.3f}'
  static const struct {
    bool ap;
    const char* iou;
    const char* area;
    int max_dets;
  } rows[kCocoStatCount] = {
      {true, "0.50:0.95", "all", 100},     {true, "0.50", "all", 100},
      {true, "0.75", "all", 100},          {true, "0.50:0.95", "small", 100},
      {true, "0.50:0.95", "medium", 100},  {true, "0.50:0.95", "large", 100},
      {false, "0.50:0.95", "all", 1},      {false, "0.50:0.95", "all", 10},
      {false, "0.50:0.95", "all", 100},    {false, "0.50:0.95", "small", 100},
      {false, "0.50:0.95", "medium", 100}, {false, "0.50:0.95", "large", 100}};
  std::string text;
  for (int i = 0; i < kCocoStatCount; ++i)
    text += fmt::format(" {:<18} {} @[ IoU={:<9} | area={:>6s} | maxDets={:>3d} ] = {:0.3f}\n",
                        rows[i].ap ? "Average Precision" : "Average Recall",
                        rows[i].ap ? "(AP)" : "(AR)", rows[i].iou, rows[i].area, rows[i].max_dets,
                        s.stats[i]);
  return text;
}

}  // namespace hpcnet::task::detect
