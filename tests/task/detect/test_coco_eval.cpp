// Tests of the COCO box metric (src/task/detect/coco_eval.h): pycocotools' COCOeval and an
// Ultralytics-style P/R on the cases of tests/golden/coco_eval_fixture.json (make_coco_eval.py)
// and coco_dataset_fixture.json (crowd, zero-size, empty) to 1e-6, hand-made cases that fail for a
// wrong matching, serialize/merge, and refused input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "src/task/detect/coco_eval.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::task::detect;
using hpcnet::test_util::input_error;

namespace {

constexpr double kTol = 1e-6;

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/coco_eval_fixture.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

CocoBox box_of(const nlohmann::json& b) {
  return {b[0].get<double>(), b[1].get<double>(), b[2].get<double>(), b[3].get<double>()};
}

std::vector<CocoGroundTruth> case_gts(const nlohmann::json& c) {
  std::vector<CocoGroundTruth> out;
  for (const auto& g : c["gts"])
    out.push_back({g["image_id"].get<int64_t>(), g["category_id"].get<int64_t>(), box_of(g["bbox"]),
                   g["area"].get<double>(), g["iscrowd"].get<int>() != 0});
  return out;
}

std::vector<CocoDetection> case_dets(const nlohmann::json& c) {
  std::vector<CocoDetection> out;
  for (const auto& d : c["dts"])
    out.push_back({d["image_id"].get<int64_t>(), d["category_id"].get<int64_t>(), box_of(d["bbox"]),
                   d["score"].get<double>()});
  return out;
}

// The case in one evaluator, in the fixture's order (images first, as COCO's "images").
CocoEvaluator case_evaluator(const nlohmann::json& c, bool fixed_categories) {
  CocoEvaluator ev = fixed_categories ? CocoEvaluator(c["categories"].get<std::vector<int64_t>>())
                                      : CocoEvaluator();
  for (int64_t i : c["images"].get<std::vector<int64_t>>()) ev.add_image(i);
  for (const auto& g : case_gts(c)) ev.add_ground_truth(g);
  for (const auto& d : case_dets(c)) ev.add_detection(d);
  return ev;
}

void expect_stats_near(const CocoSummary& s, const nlohmann::json& want, const std::string& what) {
  for (int i = 0; i < kCocoStatCount; ++i)
    EXPECT_NEAR(s.stats[i], want[i].get<double>(), kTol) << what << " stat " << kCocoStatNames[i];
}

void expect_same_summary(const CocoSummary& a, const CocoSummary& b, const std::string& what) {
  for (int i = 0; i < kCocoStatCount; ++i)
    EXPECT_EQ(a.stats[i], b.stats[i]) << what << " " << kCocoStatNames[i];
  EXPECT_EQ(a.category_ids, b.category_ids) << what;
  EXPECT_EQ(a.instances, b.instances) << what;
  EXPECT_EQ(a.images, b.images) << what;
  EXPECT_EQ(a.ap50, b.ap50) << what;
  EXPECT_EQ(a.ap50_95, b.ap50_95) << what;
  EXPECT_EQ(a.precision, b.precision) << what;
  EXPECT_EQ(a.recall, b.recall) << what;
  EXPECT_EQ(a.f1_index, b.f1_index) << what;
}

CocoGroundTruth gt(int64_t img, int64_t cat, CocoBox b, bool crowd = false) {
  return {img, cat, b, std::nullopt, crowd};
}
CocoDetection det(int64_t img, int64_t cat, CocoBox b, double score) {
  return {img, cat, b, score};
}

}  // namespace

// The thresholds are np.linspace's, bit for bit (the 9th is 0.8999999999999999).
TEST(CocoEval, ThresholdsAreNumpys) {
  const auto iou = coco_iou_thresholds();
  const auto rec = coco_recall_thresholds();
  const auto& f = fixture();
  ASSERT_EQ(f["iou_thrs"].size(), iou.size());
  ASSERT_EQ(f["rec_thrs"].size(), rec.size());
  for (size_t i = 0; i < iou.size(); ++i) EXPECT_EQ(iou[i], f["iou_thrs"][i].get<double>()) << i;
  for (size_t i = 0; i < rec.size(); ++i) EXPECT_EQ(rec[i], f["rec_thrs"][i].get<double>()) << i;
  EXPECT_NE(iou[8], 0.9);
  EXPECT_EQ(iou[5], 0.75);
}

// maskApi.c's bbIou: union = detection area for crowd, 0 without positive overlap.
TEST(CocoEval, BoxIou) {
  EXPECT_DOUBLE_EQ(coco_box_iou({0, 0, 10, 10}, {0, 0, 10, 10}, false), 1.0);
  EXPECT_EQ(coco_box_iou({0, 0, 10, 5}, {0, 0, 10, 10}, false), 0.5);
  EXPECT_EQ(coco_box_iou({10, 0, 10, 10}, {0, 0, 10, 10}, false), 0.0);  // touching edges
  EXPECT_EQ(coco_box_iou({5, 5, 10, 10}, {0, 0, 100, 100}, true), 1.0);  // inside a crowd
  EXPECT_EQ(coco_box_iou({-5, 0, 10, 10}, {0, 0, 100, 100}, true), 0.5);
}

// Every fixture case: the 12 stats, the per-class AP50 / AP50-95 and P / R to 1e-6 of pycocotools
// and the Ultralytics formula, the max-F1 index exactly; categories given or found.
TEST(CocoEval, MatchesPycocotools) {
  const auto& cases = fixture()["cases"];
  ASSERT_GE(cases.size(), 6u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const CocoSummary s = case_evaluator(c, true).summarize();
    expect_stats_near(s, c["stats"], name);
    const auto cats = c["categories"].get<std::vector<int64_t>>();
    ASSERT_EQ(s.category_ids, cats);
    std::map<int64_t, int64_t> instances;
    std::map<int64_t, std::set<int64_t>> images;
    for (const auto& g : case_gts(c))
      if (!g.iscrowd) ++instances[g.category_id], images[g.category_id].insert(g.image_id);
    double mp = 0, mr = 0;
    int nc = 0;
    for (size_t k = 0; k < cats.size(); ++k) {
      EXPECT_NEAR(s.ap50[k], c["ap50"][k].get<double>(), kTol) << "category " << cats[k];
      EXPECT_NEAR(s.ap50_95[k], c["ap50_95"][k].get<double>(), kTol) << "category " << cats[k];
      EXPECT_NEAR(s.precision[k], c["precision"][k].get<double>(), kTol) << "category " << cats[k];
      EXPECT_NEAR(s.recall[k], c["recall"][k].get<double>(), kTol) << "category " << cats[k];
      EXPECT_EQ(s.instances[k], instances[cats[k]]) << "category " << cats[k];
      EXPECT_EQ(s.images[k], static_cast<int64_t>(images[cats[k]].size()))
          << "category " << cats[k];
      if (s.instances[k] > 0) mp += s.precision[k], mr += s.recall[k], ++nc;
    }
    EXPECT_EQ(s.f1_index, c["f1_index"].get<int>());
    EXPECT_DOUBLE_EQ(s.f1_confidence, s.f1_index / 999.0);
    if (nc) {
      EXPECT_NEAR(s.mean_precision, mp / nc, 1e-12);
      EXPECT_NEAR(s.mean_recall, mr / nc, 1e-12);
    }
    // Categories found from the boxes: the same stats (a category without gts counts nowhere).
    const CocoSummary found = case_evaluator(c, false).summarize();
    for (int i = 0; i < kCocoStatCount; ++i) EXPECT_EQ(found.stats[i], s.stats[i]) << i;
  }
}

// The cases of coco_dataset_fixture.json (make_coco_dataset_cases.py: crowd regions, zero-size
// boxes, images without ground truth or detections, absent categories) straight into the
// evaluator, in COCO's ids: pycocotools' 12 numbers and per-class AP.
// (tests/task/detect/test_detect.cpp reads the same cases through the COCO reader and the loader.)
TEST(CocoEval, CrowdAndZeroSizeCasesMatchPycocotools) {
  std::ifstream f(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/coco_dataset_fixture.json");
  const nlohmann::json cases = nlohmann::json::parse(f)["cases"];
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    CocoEvaluator ev(c["categories"].get<std::vector<int64_t>>());
    for (const auto& im : c["images"]) ev.add_image(im["id"].get<int64_t>());
    const nlohmann::json with_gts = {{"gts", c["annotations"]}};
    for (const auto& g : case_gts(with_gts)) ev.add_ground_truth(g);
    for (const auto& d : case_dets(c)) ev.add_detection(d);
    const CocoSummary s = ev.summarize();
    expect_stats_near(s, c["stats"], name);
    for (size_t k = 0; k < s.category_ids.size(); ++k) {
      EXPECT_NEAR(s.ap50[k], c["ap50"][k].get<double>(), kTol) << name << " " << k;
      EXPECT_NEAR(s.ap50_95[k], c["ap50_95"][k].get<double>(), kTol) << name << " " << k;
    }
  }
}

// A lower-scored detection must not take the gt from a higher-scored one, even with a better IoU:
// greedy by score. Detection A (0.9) has IoU 0.6, B (0.8) IoU 1: A is the match at thresholds
// 0.50-0.60 (B a false positive: precision 1 at recall 1), B at 0.65-0.95 (after the false
// positive A: precision 0.5). AP = (3 * 1 + 7 * 0.5) / 10. A matching by best IoU would give
// AP50 0.5.
TEST(CocoEval, HigherScoreMatchesFirst) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  ev.add_detection(det(1, 1, {0, 0, 10, 6}, 0.9));
  ev.add_detection(det(1, 1, {0, 0, 10, 10}, 0.8));
  const CocoSummary s = ev.summarize();
  EXPECT_NEAR(s.stats[kCocoStatAp50], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAp75], 0.5, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAp], 0.65, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAr1], 0.3, 1e-12);  // the top-1 (A) recalls the gt at 3 of 10
  EXPECT_NEAR(s.stats[kCocoStatAr100], 1.0, 1e-12);
  // The same with the scores swapped: B first matches at every threshold, A is a false positive.
  CocoEvaluator ev2;
  ev2.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  ev2.add_detection(det(1, 1, {0, 0, 10, 6}, 0.8));
  ev2.add_detection(det(1, 1, {0, 0, 10, 10}, 0.9));
  EXPECT_NEAR(ev2.summarize().stats[kCocoStatAp], 1.0, 1e-12);
  // Two gts: the higher-scored detection takes the gt it overlaps best, the other gets the other.
  CocoEvaluator ev3;
  ev3.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  ev3.add_ground_truth(gt(1, 1, {5, 0, 10, 10}));
  ev3.add_detection(det(1, 1, {4, 0, 10, 10}, 0.9));  // IoU 0.43 with the first, 0.82 the second
  ev3.add_detection(det(1, 1, {1, 0, 10, 10}, 0.8));  // 0.82 with the first, 0.43 the second
  EXPECT_NEAR(ev3.summarize().stats[kCocoStatAp50], 1.0, 1e-12);
}

// Crowd regions: detections inside one are ignored (any number of them; IoU = intersection over
// the detection's area), and the crowd gt is never a miss. As plain gts they would be false
// positives (AP 1/3), and a crowd matched once would leave one (AP 0.5).
TEST(CocoEval, CrowdRegionsIgnoreTheirDetections) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  ev.add_ground_truth(gt(1, 1, {100, 100, 50, 50}, true));
  ev.add_detection(det(1, 1, {110, 110, 10, 10}, 0.9));
  ev.add_detection(det(1, 1, {120, 120, 10, 10}, 0.8));
  ev.add_detection(det(1, 1, {0, 0, 10, 10}, 0.7));
  ev.add_detection(det(1, 1, {95, 95, 10, 10}, 0.6));  // crowd IoU 25/100: a false positive
  const CocoSummary s = ev.summarize();
  EXPECT_NEAR(s.stats[kCocoStatAp], 1.0, 1e-12);  // the false positive comes after recall 1
  EXPECT_NEAR(s.stats[kCocoStatAr100], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAr1], 0.0, 1e-12);  // the top-1 is ignored: it recalls nothing
  EXPECT_EQ(s.instances, std::vector<int64_t>{1});
  EXPECT_EQ(s.recall, std::vector<double>{1.0});  // the ignored detections are no false positives
  // Only crowd gts in a category: no gts to find, the category is -1 everywhere.
  CocoEvaluator crowd_only;
  crowd_only.add_ground_truth(gt(1, 1, {0, 0, 50, 50}, true));
  crowd_only.add_detection(det(1, 1, {0, 0, 50, 50}, 0.9));
  const CocoSummary c = crowd_only.summarize();
  for (double v : c.stats) EXPECT_EQ(v, -1.0);
  EXPECT_EQ(c.ap50_95, std::vector<double>{-1.0});
  EXPECT_EQ(c.precision, std::vector<double>{-1.0});
}

// maxDets caps detections per image and category, by score: not per category over all images.
TEST(CocoEval, MaxDetsCapsPerImage) {
  // One image: 100 false positives outscore 5 exact detections, which the cap drops.
  CocoEvaluator ev;
  for (int g = 0; g < 5; ++g) ev.add_ground_truth(gt(1, 1, {g * 20.0, 0, 10, 10}));
  for (int d = 0; d < 100; ++d)
    ev.add_detection(det(1, 1, {500, 500 + d * 20.0, 10, 10}, 0.9 - d * 1e-3));
  for (int g = 0; g < 5; ++g) ev.add_detection(det(1, 1, {g * 20.0, 0, 10, 10}, 0.1));
  CocoSummary s = ev.summarize();
  EXPECT_EQ(s.stats[kCocoStatAp], 0.0);
  EXPECT_EQ(s.stats[kCocoStatAr100], 0.0);
  EXPECT_EQ(s.recall, std::vector<double>{0.0});
  // Two images of 60 detections each: each keeps all 60, so the exact ones count.
  CocoEvaluator two;
  for (int img = 1; img <= 2; ++img) {
    for (int g = 0; g < 5; ++g) two.add_ground_truth(gt(img, 1, {g * 20.0, 0, 10, 10}));
    for (int d = 0; d < 55; ++d)
      two.add_detection(det(img, 1, {500, 500 + d * 20.0, 10, 10}, 0.9 - d * 1e-3));
    for (int g = 0; g < 5; ++g)
      two.add_detection(det(img, 1, {g * 20.0, 0, 10, 10}, 0.1 + g * 1e-3));
  }
  s = two.summarize();
  EXPECT_NEAR(s.stats[kCocoStatAr100], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAr10], 0.0, 1e-12);  // the top 10 of each image are all wrong
  // AR@1 and AR@10: the top-1 of each image is right, the rest wrong.
  CocoEvaluator top;
  for (int img = 1; img <= 3; ++img) {
    for (int g = 0; g < 4; ++g) top.add_ground_truth(gt(img, 1, {g * 20.0, 0, 10, 10}));
    top.add_detection(det(img, 1, {0, 0, 10, 10}, 0.99));
    for (int g = 1; g < 4; ++g) top.add_detection(det(img, 1, {g * 20.0, 0, 10, 10}, 0.5));
  }
  s = top.summarize();
  EXPECT_NEAR(s.stats[kCocoStatAr1], 0.25, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatAr10], 1.0, 1e-12);
}

// Area ranges use the gt's area field (not its box), include both ends, and ignore unmatched
// detections outside the range.
TEST(CocoEval, AreaRanges) {
  CocoEvaluator ev;
  CocoGroundTruth g = gt(1, 1, {0, 0, 40, 40});  // box area 1600 (medium), segment area 500
  g.area = 500;
  ev.add_ground_truth(g);
  ev.add_detection(det(1, 1, {0, 0, 40, 40}, 0.8));
  ev.add_detection(det(1, 1, {200, 200, 120, 120}, 0.9));  // a large false positive, first
  CocoSummary s = ev.summarize();
  EXPECT_NEAR(s.stats[kCocoStatAp], 0.5, 1e-12);       // after the false positive
  EXPECT_NEAR(s.stats[kCocoStatApSmall], 1.0, 1e-12);  // the large one is outside: ignored
  EXPECT_EQ(s.stats[kCocoStatApMedium], -1.0);
  EXPECT_EQ(s.stats[kCocoStatApLarge], -1.0);
  EXPECT_NEAR(s.stats[kCocoStatArSmall], 1.0, 1e-12);
  EXPECT_EQ(s.stats[kCocoStatArMedium], -1.0);

  // Area exactly 32^2 is small and medium; a matched detection outside the range still counts
  // (only unmatched ones are ignored), a gt outside is ignored but still matched.
  CocoEvaluator edge;
  edge.add_ground_truth(gt(1, 1, {0, 0, 32, 32}));
  edge.add_detection(det(1, 1, {0, 0, 32, 32}, 0.9));
  s = edge.summarize();
  EXPECT_NEAR(s.stats[kCocoStatApSmall], 1.0, 1e-12);
  EXPECT_NEAR(s.stats[kCocoStatApMedium], 1.0, 1e-12);
  EXPECT_EQ(s.stats[kCocoStatApLarge], -1.0);

  CocoEvaluator mixed;  // a small and a large gt; detections exact
  mixed.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  mixed.add_ground_truth(gt(1, 1, {100, 100, 200, 200}));
  mixed.add_detection(det(1, 1, {100, 100, 200, 200}, 0.9));
  mixed.add_detection(det(1, 1, {0, 0, 10, 10}, 0.8));
  s = mixed.summarize();
  EXPECT_NEAR(s.stats[kCocoStatApSmall], 1.0, 1e-12);  // the large detection matched an ignored gt
  EXPECT_NEAR(s.stats[kCocoStatApLarge], 1.0, 1e-12);
}

// No detections at all, and images or categories without anything.
TEST(CocoEval, EmptyInputs) {
  CocoEvaluator none;
  for (double v : none.summarize().stats) EXPECT_EQ(v, -1.0);
  CocoEvaluator gts_only({1, 2});
  gts_only.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  gts_only.add_image(2);
  const CocoSummary s = gts_only.summarize();
  EXPECT_EQ(s.stats[kCocoStatAp], 0.0);
  EXPECT_EQ(s.stats[kCocoStatApMedium], -1.0);
  EXPECT_EQ(s.category_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s.ap50, (std::vector<double>{0.0, -1.0}));
  EXPECT_EQ(s.precision, (std::vector<double>{0.0, -1.0}));
  EXPECT_EQ(s.images, (std::vector<int64_t>{1, 0}));
}

// Ranks' evaluators serialized and merged give what one evaluator of everything gives, bit for
// bit, whatever order the images came in; an image on two ranks (padding) counts once.
TEST(CocoEval, SerializeMergeMatchesOneEvaluator) {
  const auto& c = fixture()["cases"][0];
  const auto cats = c["categories"].get<std::vector<int64_t>>();
  const auto gts = case_gts(c);
  const auto dets = case_dets(c);
  const auto images = c["images"].get<std::vector<int64_t>>();
  const CocoSummary whole = case_evaluator(c, true).summarize();

  constexpr int kRanks = 3;
  std::vector<CocoEvaluator> ranks(kRanks, CocoEvaluator(cats));
  for (auto it = images.rbegin(); it != images.rend(); ++it) {  // reversed: order must not matter
    const int64_t img = *it;
    std::vector<CocoGroundTruth> g;
    std::vector<CocoDetection> d;
    for (const auto& x : gts)
      if (x.image_id == img) g.push_back(x);
    for (const auto& x : dets)
      if (x.image_id == img) d.push_back(x);
    ranks[img % kRanks].add_image(img, g, d);
    if (img == images.front()) ranks[(img + 1) % kRanks].add_image(img, g, d);  // a repeated sample
  }
  CocoEvaluator merged = ranks[0];
  for (int r = 1; r < kRanks; ++r) {
    const std::vector<double> state = ranks[r].serialize();
    merged.merge(state);
  }
  EXPECT_EQ(merged.num_images(), images.size());
  EXPECT_EQ(merged.detections().size(), dets.size());
  expect_same_summary(merged.summarize(), whole, "merged");
  expect_stats_near(merged.summarize(), c["stats"], "merged");

  // A round trip through serialize into an empty evaluator is the same evaluator.
  CocoEvaluator copy(cats);
  copy.merge(case_evaluator(c, true).serialize());
  expect_same_summary(copy.summarize(), whole, "copy");
}

TEST(CocoEval, MergeRefusesForeignVectors) {
  CocoEvaluator ev({1});
  ev.add_ground_truth(gt(1, 1, {0, 0, 10, 10}));
  std::vector<double> state = ev.serialize();
  CocoEvaluator other({1});
  EXPECT_TRUE(input_error(
      [&] {
        other.merge(std::vector<double>{1, 2, 3});
      },
      "serialize() marker"));
  std::vector<double> cut(state.begin(), state.end() - 2);
  EXPECT_TRUE(input_error([&] { other.merge(cut); }, "does not fit"));
  std::vector<double> longer = state;
  longer.push_back(0);
  EXPECT_TRUE(input_error([&] { other.merge(longer); }, "follow the last detection"));
  std::vector<double> v2 = state;
  v2[1] = 2;
  EXPECT_TRUE(input_error([&] { other.merge(v2); }, "layout version 2"));
  CocoEvaluator free_cats;
  EXPECT_TRUE(input_error([&] { free_cats.merge(state); }, "another category list"));
  CocoEvaluator other_cats({1, 2});
  EXPECT_TRUE(input_error([&] { other_cats.merge(state); }, "another category list"));
  EXPECT_EQ(other.num_images(), 0u);  // nothing was added by the refused merges
  EXPECT_TRUE(other.ground_truths().empty());
}

TEST(CocoEval, RefusesBadInput) {
  CocoEvaluator ev({1, 2});
  EXPECT_TRUE(input_error([&] { ev.add_ground_truth(gt(1, 1, {0, 0, -1, 10})); }, "w, h >= 0"));
  EXPECT_TRUE(input_error([&] { ev.add_ground_truth(gt(1, 1, {NAN, 0, 1, 10})); }, "finite"));
  CocoGroundTruth bad_area = gt(1, 1, {0, 0, 1, 1});
  bad_area.area = -3;
  EXPECT_TRUE(input_error([&] { ev.add_ground_truth(bad_area); }, "area -3"));
  EXPECT_TRUE(input_error([&] { ev.add_ground_truth(gt(1, 7, {0, 0, 1, 1})); }, "category 7"));
  EXPECT_TRUE(input_error(
      [&] {
        ev.add_detection(det(5, 1, {0, 0, 1, 1}, 0.5));
      },
      "image 5, which the evaluator does not know"));
  ev.add_image(5);
  EXPECT_TRUE(input_error([&] { ev.add_detection(det(5, 1, {0, 0, 1, 1}, NAN)); }, "score"));
  EXPECT_TRUE(input_error([&] { ev.add_detection(det(5, 1, {0, 0, 1, -2}, 0.5)); }, "w, h >= 0"));
  EXPECT_TRUE(input_error([&] { ev.add_detection(det(5, 3, {0, 0, 1, 1}, 0.5)); }, "category 3"));
  EXPECT_TRUE(input_error(
      [&] {
        ev.add_detection(det(int64_t{1} << 60, 1, {0, 0, 1, 1}, 0.5));
      },
      "2^53"));
  const std::vector<CocoDetection> wrong = {det(6, 1, {0, 0, 1, 1}, 0.5)};
  EXPECT_TRUE(input_error([&] { ev.add_image(5, {}, wrong); }, "on image 6"));
  EXPECT_TRUE(input_error([&] { CocoEvaluator({1, 2, 1}); }, "listed twice"));
  ev.add_detection(det(5, 1, {0, 0, 1, 1}, 0.5));  // still usable
  EXPECT_EQ(ev.detections().size(), 1u);
  EXPECT_TRUE(ev.ground_truths().empty());
}

// The results file is COCO's results format at full precision, in the order given.
TEST(CocoEval, ResultsJson) {
  const std::vector<CocoDetection> dets = {det(3, 1, {1.5, 2.25, 10, 20.125}, 0.123456789012345),
                                           det(1, 7, {0, 0, 1, 1}, 1.0)};
  const nlohmann::json j = coco_results_json(dets);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["image_id"], 3);
  EXPECT_EQ(j[0]["category_id"], 1);
  EXPECT_EQ(j[0]["bbox"], nlohmann::json({1.5, 2.25, 10.0, 20.125}));
  EXPECT_EQ(j[0]["score"].get<double>(), 0.123456789012345);
  EXPECT_EQ(j[1]["category_id"], 7);
  test_util::TempDir dir("coco");
  write_coco_results(dir.str("results.json"), dets);
  const nlohmann::json back = nlohmann::json::parse(test_util::read_file(dir / "results.json"));
  EXPECT_EQ(back, j);
  EXPECT_EQ(coco_results_json({}), nlohmann::json::array());
}

TEST(CocoEval, SummaryTextLikePycocotools) {
  CocoSummary s;
  s.stats.fill(-1);
  s.stats[kCocoStatAp] = 0.65;
  s.stats[kCocoStatAr1] = 0.3;
  const auto lines = test_util::split_lines(coco_summary_text(s));
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_EQ(lines[0],
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.650");
  EXPECT_EQ(lines[2],
            " Average Precision  (AP) @[ IoU=0.75      | area=   all | maxDets=100 ] = -1.000");
  EXPECT_EQ(lines[6],
            " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=  1 ] = 0.300");
  EXPECT_EQ(lines[10],
            " Average Recall     (AR) @[ IoU=0.50:0.95 | area=medium | maxDets=100 ] = -1.000");
}

// Many images: the work grows with the boxes, not with images x categories (this would take
// minutes if each image's boxes were found by a pass over all of them).
TEST(CocoEval, ScalesWithBoxes) {
  constexpr int kImages = 20000, kCats = 80;
  CocoEvaluator ev;
  uint64_t state = 12345;
  auto next = [&] {
    return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33;
  };
  for (int img = 0; img < kImages; ++img) {
    const int64_t cat = static_cast<int64_t>(next() % kCats);
    const double x = static_cast<double>(next() % 500), y = static_cast<double>(next() % 500);
    ev.add_ground_truth(gt(img, cat, {x, y, 40, 30}));
    ev.add_detection(det(img, cat, {x + 2, y, 40, 30}, static_cast<double>(next() % 1000) / 1000));
    ev.add_detection(
        det(img, (cat + 1) % kCats, {x, y, 40, 30}, static_cast<double>(next() % 1000) / 1000));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const CocoSummary s = ev.summarize();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(s.stats[kCocoStatAp50], 0.3);
  EXPECT_EQ(s.category_ids.size(), static_cast<size_t>(kCats));
  std::printf("CocoEval.ScalesWithBoxes: %d images, %zu detections, %d categories: %.3f s\n",
              kImages, ev.detections().size(), kCats, sec);
}
