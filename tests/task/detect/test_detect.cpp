// The detection task around the model: NMS and the letterbox mapping (detect.h), the metric's
// ground truth from a COCO dataset against pycocotools (coco_dataset_fixture.json) and the training
// targets, Ultralytics' augmentation (RandomAffine, RandomHSV), its training recipe (parameter
// groups, the linear schedule with its warm-up, the EMA ramp, --optimizer auto, the nominal-batch
// weight decay), and the whole `hpcnet train|eval|predict --task detect` on a tiny YOLO dataset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/profile.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "src/nn/models/models.h"
#include "src/task/detect/detect.h"
#include "src/task/detect/yolo_loss.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;
namespace det = hpcnet::task::detect;

namespace {

// Decoded predictions (4 + nc, A) row-major from per-anchor boxes (cx, cy, w, h) and scores.
std::vector<float> dt_pred(const std::vector<std::array<float, 4>>& boxes,
                           const std::vector<std::vector<float>>& scores) {
  const size_t A = boxes.size(), nc = scores[0].size();
  std::vector<float> p((4 + nc) * A);
  for (size_t a = 0; a < A; ++a) {
    for (size_t k = 0; k < 4; ++k) p[k * A + a] = boxes[a][k];
    for (size_t c = 0; c < nc; ++c) p[(4 + c) * A + a] = scores[a][c];
  }
  return p;
}

}  // namespace

// Class-aware greedy NMS as Ultralytics': single-label at predict's conf, multi-label at the
// validator's, strict thresholds, max_det, sorted by score.
TEST(DetectPost, NmsIsPerClassGreedyAndMultiLabel) {
  // Anchors 0 and 1 overlap heavily (IoU 0.905), anchor 2 is anchor 0's box, anchor 3 far away.
  const auto p = dt_pred({{20, 20, 20, 20}, {21, 20, 20, 20}, {20, 20, 20, 20}, {90, 90, 10, 10}},
                         {{0.9f, 0.05f}, {0.8f, 0.f}, {0.f, 0.7f}, {0.25f, 0.f}});
  det::NmsOptions o;
  o.conf = 0.25f;  // predict: single label; 0.25 itself is not above 0.25
  auto d = det::nms(p.data(), 4, 2, o);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].anchor, 0);
  EXPECT_EQ(d[0].cls, 0);
  EXPECT_FLOAT_EQ(d[0].score, 0.9f);
  EXPECT_EQ(d[1].anchor, 2);  // the same box, another class: kept
  EXPECT_EQ(d[1].cls, 1);
  EXPECT_FLOAT_EQ(d[0].box[0], 10.f);
  EXPECT_FLOAT_EQ(d[0].box[3], 30.f);
  o.conf = 0.001f;  // validation: every (anchor, class) pair above conf
  o.multi_label = true;
  d = det::nms(p.data(), 4, 2, o);
  ASSERT_EQ(d.size(), 3u);  // 0.9 c0, 0.7 c1, 0.25 c0 far; 0.8 c0 and 0.05 c1 suppressed
  EXPECT_FLOAT_EQ(d[1].score, 0.7f);
  EXPECT_EQ(d[2].anchor, 3);
  o.max_det = 2;
  EXPECT_EQ(det::nms(p.data(), 4, 2, o).size(), 2u);
  o.iou = 0.95f;  // IoU 380 / 420 = 0.905 is no longer enough to suppress anchor 1
  o.max_det = 300;
  EXPECT_EQ(det::nms(p.data(), 4, 2, o).size(), 4u);
}

// Predict decodes only the anchors whose best logit can pass conf; NMS on them gives exactly
// the detections NMS gives on the whole decoding (random head outputs for a 64 x 96 input, logits
// spread so that some anchors sit right at the threshold, several conf values, both labels).
TEST(DetectPost, CandidatesGiveTheWholeDecodingsDetections) {
  const int64_t B = 2, nc = 5, h = 64, w = 96;
  const int64_t A = det::make_anchors(h, w).size();
  Rng rng(7);
  Tensor boxes = Tensor::empty({B, 4 * det::kRegMax, A}), scores = Tensor::empty({B, nc, A});
  for (int64_t i = 0; i < boxes.numel(); ++i)
    boxes.data<float>()[i] = static_cast<float>(rng.normal() * 2);
  for (int64_t i = 0; i < scores.numel(); ++i)
    scores.data<float>()[i] = static_cast<float>(rng.normal() * 1.5 - 1.5);
  scores.data<float>()[3] = std::log(0.25f / 0.75f);  // sigmoid at conf 0.25 (or next to it)
  const Tensor pred = det::decode_predictions(boxes, scores, h, w);
  for (const float conf : {0.f, 0.001f, 0.25f, 0.5f, 0.9f, 1.f})
    for (const bool multi : {false, true})
      for (int64_t b = 0; b < B; ++b) {
        det::NmsOptions o;
        o.conf = conf;
        o.multi_label = multi;
        const auto whole = det::nms(pred.data<float>() + b * (4 + nc) * A, A, nc, o);
        const det::Candidates c = det::decode_candidates(boxes, scores, h, w, b, conf);
        EXPECT_LE(c.anchor.size(), static_cast<size_t>(A));
        auto some = det::nms(c.pred.data(), static_cast<int64_t>(c.anchor.size()), nc, o);
        for (det::Detection& d : some) d.anchor = c.anchor[static_cast<size_t>(d.anchor)];
        ASSERT_EQ(some.size(), whole.size()) << "conf " << conf << " multi " << multi;
        for (size_t i = 0; i < whole.size(); ++i) {
          EXPECT_EQ(some[i].anchor, whole[i].anchor);
          EXPECT_EQ(some[i].cls, whole[i].cls);
          EXPECT_EQ(some[i].score, whole[i].score);
          EXPECT_EQ(some[i].box, whole[i].box);
        }
        if (conf == 0.9f) EXPECT_LT(c.anchor.size(), static_cast<size_t>(A) / 4);
      }
}

// Boxes of a letterboxed input mapped back to the original (scale_boxes), clipped to it.
TEST(DetectPost, UnletterboxMapsBackAndClips) {
  // 100 wide, 50 high into 64: scale 0.64, 64 x 32 at top 16.
  auto b = det::unletterbox({0.f, 16.f, 64.f, 48.f}, 64, 50, 100);
  EXPECT_NEAR(b[0], 0, 1e-4);
  EXPECT_NEAR(b[1], 0, 1e-4);
  EXPECT_NEAR(b[2], 100, 1e-4);
  EXPECT_NEAR(b[3], 50, 1e-4);
  b = det::unletterbox({32.f, 0.f, 70.f, 24.f}, 64, 50, 100);  // partly in the padding
  EXPECT_NEAR(b[0], 50, 1e-4);
  EXPECT_NEAR(b[1], 0, 1e-4);
  EXPECT_NEAR(b[2], 100, 1e-4);
  EXPECT_NEAR(b[3], 12.5, 1e-4);
  // Predict's letterbox (stride 32): 100 x 50 into 64 gives 64 x 32 with no padding, so the
  // same box sits 16 rows higher than in the square.
  b = det::unletterbox({0.f, 0.f, 64.f, 32.f}, 64, 50, 100, 32);
  EXPECT_NEAR(b[0], 0, 1e-4);
  EXPECT_NEAR(b[1], 0, 1e-4);
  EXPECT_NEAR(b[2], 100, 1e-4);
  EXPECT_NEAR(b[3], 50, 1e-4);
}

// ---- the metric's ground truth ----------------------------------------------------------------

namespace {

// The cases of tests/golden/coco_dataset_fixture.json (make_coco_dataset_cases.py).
const nlohmann::json& coco_dataset_cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/coco_dataset_fixture.json");
    return nlohmann::json::parse(f);
  }();
  return j["cases"];
}

// A case as a COCO dataset in dir: annotations/instances_val.json and images/val/<id>.png.
void write_coco_case(const fs::path& dir, const nlohmann::json& c) {
  fs::create_directories(dir / "images" / "val");
  fs::create_directories(dir / "annotations");
  nlohmann::json coco = {{"images", nlohmann::json::array()},
                         {"annotations", c["annotations"]},
                         {"categories", nlohmann::json::array()}};
  for (const auto& im : c["images"]) {
    const int w = im["width"], h = im["height"];
    const std::string file = "images/val/" + std::to_string(im["id"].get<int64_t>()) + ".png";
    write_png_file(dir / file, w, h, noisy_pixels(w, h, 90, 120, 150, 7, 0, 10));
    coco["images"].push_back({{"id", im["id"]}, {"file_name", file}, {"width", w}, {"height", h}});
  }
  for (const auto& k : c["categories"])
    coco["categories"].push_back({{"id", k}, {"name", "c" + std::to_string(k.get<int64_t>())}});
  write_file(dir / "annotations" / "instances_val.json", coco.dump());
}

}  // namespace

// Each fixture case (crowd regions, zero-size boxes, images without ground truth or without
// detections, categories absent from either side) read as a COCO dataset by the COCO reader,
// letterboxed by the detect task's eval transform (to 320: scale 2, so exact) and mapped back by
// batch_ground_truths, with the case's detections, gives pycocotools' 12 numbers and per-class AP:
// crowd regions are ignore regions and zero-size boxes objects nothing matches, not dropped.
TEST(DetectMetric, CocoGroundTruthThroughTheLoaderAsPycocotools) {
  const auto& cases = coco_dataset_cases();
  ASSERT_GE(cases.size(), 5u);
  task::TaskOptions opt;
  opt.imgsz = 320;
  const auto t = task::make_task("detect", opt);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    TempDir d("coco_case");
    write_coco_case(d.path(), c);
    const data::DetectionData dd =
        data::load_detection_dataset(d.str("annotations/instances_val.json"), "val");
    int64_t crowd = 0, zero = 0;
    for (const auto& a : c["annotations"]) {
      const bool is_crowd = a["iscrowd"].get<int>() == 1;
      crowd += is_crowd;
      zero += !is_crowd && (a["bbox"][2].get<double>() == 0 || a["bbox"][3].get<double>() == 0);
    }
    EXPECT_EQ(dd.report.crowd, crowd) << name;
    EXPECT_EQ(dd.report.degenerate, zero) << name;
    EXPECT_EQ(dd.report.objects, static_cast<int64_t>(c["annotations"].size())) << name;

    const int64_t K = static_cast<int64_t>(dd.category_ids.size());
    std::vector<int64_t> classes(static_cast<size_t>(K));
    std::iota(classes.begin(), classes.end(), 0);
    det::CocoEvaluator ev(classes);  // as the metric: dataset indices and class indices
    for (int64_t i = 0; i < dd.dataset->size(); ++i) ev.add_image(i);
    data::DataLoaderOptions lo;
    lo.batch_size = 4;
    data::DataLoader loader(dd.dataset, t->eval_transform(), lo);
    loader.begin_epoch(0);
    data::Batch b;
    while (loader.next(b))
      for (int64_t i = 0; i < b.size; ++i)
        for (const det::CocoGroundTruth& g : det::batch_ground_truths(b, i, opt.imgsz))
          ev.add_ground_truth(g);
    EXPECT_EQ(ev.ground_truths().size(), c["annotations"].size()) << name;
    auto index_of = [](const std::vector<int64_t>& ids, int64_t id) {
      return static_cast<int64_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
    };
    for (const auto& x : c["dts"]) {
      const auto& bb = x["bbox"];
      ev.add_detection(
          {index_of(dd.image_ids, x["image_id"]),
           index_of(dd.category_ids, x["category_id"]),
           {bb[0].get<double>(), bb[1].get<double>(), bb[2].get<double>(), bb[3].get<double>()},
           x["score"].get<double>()});
    }
    const det::CocoSummary s = ev.summarize();
    for (int k = 0; k < det::kCocoStatCount; ++k)
      EXPECT_NEAR(s.stats[k], c["stats"][k].get<double>(), 1e-6)
          << name << " " << det::kCocoStatNames[k];
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_NEAR(s.ap50[k], c["ap50"][k].get<double>(), 1e-6) << name << " class " << k;
      EXPECT_NEAR(s.ap50_95[k], c["ap50_95"][k].get<double>(), 1e-6) << name << " class " << k;
    }
  }
}

// Training learns from neither crowd regions nor boxes under a pixel (zero-size ones included),
// which the loader keeps for the metric.
TEST(DetectMetric, TrainingTargetsLeaveOutCrowdAndZeroSizeBoxes) {
  data::Box crowd{1, 0, 0, 40, 40, 900.f, true};
  const std::vector<std::vector<data::Box>> boxes = {
      {{0, 1, 1, 9, 9}, crowd, {2, 5, 5, 5, 20}, {2, 5, 5, 5.5f, 20}, {1, 3, 4, 4, 5}}, {}};
  const std::vector<det::ImageTargets> t = det::targets_of(boxes);
  ASSERT_EQ(t.size(), 2u);
  ASSERT_EQ(t[0].boxes.size(), 2u);
  EXPECT_EQ(t[0].boxes[0], (std::array<float, 4>{1, 1, 9, 9}));
  EXPECT_EQ(t[0].boxes[1], (std::array<float, 4>{3, 4, 4, 5}));  // exactly one pixel: kept
  EXPECT_EQ(t[0].labels, (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(t[1].boxes.empty());
}

// RandomAffine with nothing random is the identity (pixels and boxes); with scale and translate,
// every kept box bounds the bright square it stood for; a box of 2 pixels or less is dropped.
TEST(DetectAugment, RandomAffineMovesBoxesWithThePixels) {
  const int S = 48;
  std::vector<uint8_t> px(S * S * 3, 0);
  for (int y = 10; y < 30; ++y)
    for (int x = 16; x < 40; ++x)
      for (int c = 0; c < 3; ++c) px[(y * S + x) * 3 + c] = 255;
  const std::vector<data::Box> boxes = {{1, 16, 10, 40, 30}, {0, 2, 2, 4, 4}};
  data::Example ex{px.data(), S, S, 0, boxes.data(), 2};
  {
    data::Compose id({data::RandomAffine{S, 0, 0, 0, 0, 114}, data::ToTensor{}});
    std::vector<float> out(3 * S * S);
    std::vector<data::Box> b;
    id.apply(ex, 7, out.data(), &b, nullptr);
    for (int i = 0; i < S * S; ++i) EXPECT_FLOAT_EQ(out[i], px[i * 3] / 255.f) << i;
    // The 2 x 2 box is dropped even unmoved: box_candidates wants more than 2 pixels.
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0], boxes[0]);
  }
  data::Compose aug({data::RandomAffine{S, 0, 0.1, 0.5, 0, 114}, data::ToTensor{}});
  int moved = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    std::vector<float> out(3 * S * S);
    std::vector<data::Box> b;
    aug.apply(ex, seed, out.data(), &b, nullptr);
    for (const data::Box& k : b) EXPECT_NE(k.cls, 0) << "a 2-pixel box survived";
    // The bright pixels' bounding box (channel 0, > 0.75).
    int x0 = S, y0 = S, x1 = -1, y1 = -1;
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x)
        if (out[y * S + x] > 0.75f)
          x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x), y1 = std::max(y1, y);
    if (b.empty()) continue;
    ASSERT_EQ(b.size(), 1u);
    EXPECT_NEAR(b[0].x1, x0, 1.5) << seed;
    EXPECT_NEAR(b[0].y1, y0, 1.5) << seed;
    EXPECT_NEAR(b[0].x2, x1 + 1, 1.5) << seed;
    EXPECT_NEAR(b[0].y2, y1 + 1, 1.5) << seed;
    if (std::abs(b[0].x2 - b[0].x1 - 24) > 1) ++moved;
  }
  EXPECT_GT(moved, 6);  // the scale really varies
}

// Mosaic: four images of one colour each, a box over the whole of each; after Mosaic and an
// unrandom RandomAffine (the canvas' centre square) every box lies on its own image's colour and
// inside the output; p = 0 is the image alone; without the dataset it is refused.
TEST(DetectAugment, MosaicPlacesFourImagesWithTheirBoxes) {
  const int S = 32;
  const uint8_t colours[4][3] = {{200, 0, 0}, {0, 200, 0}, {0, 0, 200}, {200, 200, 0}};
  data::InMemoryDataset ds({"r", "g", "b", "y"}, "four", data::TargetKind::kBoxes);
  for (int k = 0; k < 4; ++k) {
    std::vector<uint8_t> px(S * S * 3);
    for (int i = 0; i < S * S; ++i)
      for (int c = 0; c < 3; ++c) px[i * 3 + c] = colours[k][c];
    ds.add_boxes(px.data(), S, S, {{k, 0, 0, S, S}});
  }
  data::Compose mo(
      {data::Mosaic{S, 1.0}, data::RandomAffine{S, 0, 0, 0, 0, 114}, data::ToTensor{}});
  EXPECT_TRUE(mo.needs_dataset());
  int boxes_seen = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    std::vector<float> out(3 * S * S);
    std::vector<data::Box> b;
    mo.apply(ds, 1, ds.get(1), seed, out.data(), &b, nullptr);
    ASSERT_FALSE(b.empty()) << seed;
    for (const data::Box& x : b) {
      EXPECT_GE(x.x1, 0.f);
      EXPECT_LE(x.x2, static_cast<float>(S));
      const int cx = static_cast<int>((x.x1 + x.x2) / 2), cy = static_cast<int>((x.y1 + x.y2) / 2);
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(out[c * S * S + cy * S + cx] * 255, colours[x.cls][c], 1)
            << seed << " " << x.cls;
    }
    boxes_seen += static_cast<int>(b.size());
  }
  EXPECT_GT(boxes_seen, 10);  // more than one image per sample on average
  // p = 0: the sample's own image, as without Mosaic.
  data::Compose off(
      {data::Mosaic{S, 0.0}, data::RandomAffine{S, 0, 0, 0, 0, 114}, data::ToTensor{}});
  std::vector<float> out(3 * S * S);
  std::vector<data::Box> b;
  off.apply(ds, 2, ds.get(2), 5, out.data(), &b, nullptr);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].cls, 2);
  EXPECT_NEAR(out[2 * S * S] * 255, 200, 1);
  data::Example ex = ds.get(0);
  EXPECT_NE(input_error([&] { mo.apply(ex, 0, out.data()); }), "no exception");
  EXPECT_NE(input_error([&] {
              data::Compose({data::Mosaic{S, 1.0}, data::ToTensor{}});
            }),
            "no exception");
}

// RandomHSV with a value gain only: a gray image stays gray and every pixel of one level moves
// to one level within the gain's range; the transform needs a first transform before it.
TEST(DetectAugment, RandomHsvValueGainOnGray) {
  const int S = 8;
  std::vector<uint8_t> px(S * S * 3, 100);
  data::Example ex{px.data(), S, S, 0};
  data::Compose c({data::Letterbox{S, 114}, data::RandomHSV{0, 0, 0.4}, data::ToTensor{}});
  std::set<int> levels;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> out(3 * S * S);
    c.apply(ex, seed, out.data());
    const int v = static_cast<int>(std::lround(out[0] * 255));
    for (int i = 0; i < 3 * S * S; ++i) ASSERT_EQ(std::lround(out[i] * 255), v) << seed;
    EXPECT_GE(v, 59);
    EXPECT_LE(v, 140);
    levels.insert(v);
  }
  EXPECT_GT(levels.size(), 5u);
  EXPECT_NE(input_error([] {
              data::Compose({data::RandomHSV{}, data::ToTensor{}});
            }),
            "no exception");
}

// Ultralytics' groups of yolov8n: decayed conv weights, BatchNorm weights, biases; weight decay
// reaches the first group only; the state round-trips.
TEST(DetectRecipe, ParameterGroupsDecayOnlyWeights) {
  auto model = nn::make_model("yolov8n", nn::ModelOptions{3});
  const auto g = optim::ultralytics_param_groups(*model, model->named_parameters());
  size_t total = 0;
  for (const auto& grp : g) total += grp.size();
  EXPECT_EQ(total, model->named_parameters().size());
  for (const auto& [n, t] : g[2]) EXPECT_NE(n.find("bias"), std::string::npos) << n;
  for (const auto& [n, t] : g[1]) EXPECT_NE(n.find(".bn.weight"), std::string::npos) << n;
  for (const auto& [n, t] : g[0]) EXPECT_EQ(n.find(".bn."), std::string::npos) << n;
  EXPECT_EQ(g[1].size(), g[2].size() - 6);  // every Conv's BN; 6 head convs have biases
  auto zero_grads = [&] {
    for (auto& [n, t] : model->named_parameters())
      if (t.requires_grad()) t.set_grad(Tensor::zeros(t.shape()));
  };
  std::map<std::string, Tensor> before;
  for (auto& [n, t] : model->named_parameters()) before[n] = t.clone();
  for (const char* kind : {"sgd", "adamw"}) {
    optim::GroupedOptimizer opt({g[0], g[1], g[2]}, [&](const nn::NamedTensors& p, size_t k) {
      const double wd = k == 0 ? 0.5 : 0.0;
      return std::string(kind) == "sgd"
                 ? std::unique_ptr<optim::Optimizer>(
                       std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1, 0.9, 0, wd, true}))
                 : std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(
                       p, optim::AdamWOptions{0.1, 0.9, 0.999, 1e-8, wd}));
    });
    zero_grads();
    opt.step();
    const Tensor& w = g[0][0].second;
    EXPECT_NE(w.to_vector()[0], before[g[0][0].first].to_vector()[0]) << kind;
    for (size_t k : {1u, 2u})
      for (auto& [n, t] : g[k]) EXPECT_TRUE(same_bytes(t, before[n])) << kind << " " << n;
    std::map<std::string, Tensor> state;
    for (auto& [n, t] : opt.state_dict()) state[n] = t;
    opt.load_state_dict(state, 1);
    state["exp_avg.nothing"] = Tensor::zeros({1});
    EXPECT_NE(input_error([&] { opt.load_state_dict(state, 1); }), "no exception");
    for (auto& [n, t] : model->named_parameters()) Tensor(t).copy_(before[n]);
  }
}

// Inference folds each Conv's BatchNorm into its convolution (Ultralytics' fuse()): with running
// statistics and affine parameters far from their initial values, the eval outputs without a graph
// (folded) equal those with one (conv, then BatchNorm) within 1e-5 of the largest; in training
// mode or with a graph nothing is folded.
TEST(DetectModel, InferenceFoldsBatchNormIntoTheConvolutions) {
  manual_seed(5);
  auto model = nn::make_model("yolov8n", nn::ModelOptions{3});
  Rng rng(11);
  for (auto& [n, t] : model->named_buffers()) {
    if (t.dtype() != DType::kFloat32) continue;
    const bool var = n.find("running_var") != std::string::npos;
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = var ? static_cast<float>(0.2 + 2 * rng.uniform())
                 : static_cast<float>(0.3 * rng.normal());
  }
  for (auto& [n, t] : model->named_parameters())
    if (n.find(".bn.") != std::string::npos) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] += static_cast<float>(0.2 * rng.normal());
    }
  Tensor x = Tensor::empty({2, 3, 64, 64});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.uniform());
  model->eval();
  const nn::Outputs plain = model->forward_all(x);  // a graph is recorded: not folded
  nn::Outputs folded;
  {
    NoGradGuard ng;
    folded = model->forward_all(x);
  }
  ASSERT_EQ(plain.size(), folded.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    const auto a = plain[k].to_vector(), b = folded[k].to_vector();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    }
    EXPECT_LT(diff, 1e-5 * scale) << "output " << k << " (largest " << scale << ")";
    EXPECT_GT(diff, 0.0) << "output " << k << ": the folded path did not run";
  }
}

// At predict time (one image, folded) each C2f writes cv1's halves and its bottlenecks' outputs
// side by side into one buffer, which is its concatenation, and the layers whose outputs the
// neck concatenates write them into the neck's buffers: no cat copies there. The outputs equal
// those of the same image in a batch of two (which concatenates by copying) and those of the
// unfolded path, within 1e-5 of the largest; the profiler sees 12 cat copies fewer (8 C2f, 4
// neck).
TEST(DetectModel, PredictOfOneImageConcatenatesC2fWithoutCopies) {
  manual_seed(6);
  auto model = nn::make_model("yolov8n", nn::ModelOptions{3});
  Rng rng(12);
  for (auto& [n, t] : model->named_buffers()) {
    if (t.dtype() != DType::kFloat32 || n.find("running_mean") == std::string::npos) continue;
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = static_cast<float>(0.1 * rng.normal());
  }
  model->eval();
  Tensor x2 = Tensor::empty({2, 3, 64, 96});
  for (int64_t i = 0; i < x2.numel(); ++i) x2.data<float>()[i] = static_cast<float>(rng.uniform());
  Tensor x1 = F::narrow(x2, 0, 0, 1).contiguous();
  auto cat_copies = [] {
    for (const auto& e : profile::entries())
      if (e.name == "cat_forward") return e.calls;
    return int64_t{0};
  };
  NoGradGuard ng;
  profile::enable(true);
  profile::reset();
  const nn::Outputs one = model->forward_all(x1);
  const int64_t copies_one = cat_copies();
  profile::reset();
  const nn::Outputs two = model->forward_all(x2);
  const int64_t copies_two = cat_copies();
  profile::enable(false);
  EXPECT_EQ(copies_two - copies_one, 12) << copies_one << " against " << copies_two;
  nn::Outputs unfolded;
  {
    struct Restore {
      ~Restore() { nn::set_inference_fusion(true); }
    } restore;
    nn::set_inference_fusion(false);
    unfolded = model->forward_all(x1);
  }
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) {
    const auto a = one[k].to_vector(), b = F::narrow(two[k], 0, 0, 1).to_vector(),
               u = unfolded[k].to_vector();
    ASSERT_EQ(a.size(), b.size());
    double diff = 0, diff_u = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
      diff_u = std::max(diff_u, static_cast<double>(std::fabs(a[i] - u[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    EXPECT_LT(diff, 1e-5 * scale) << "output " << k << " (largest " << scale << ")";
    EXPECT_LT(diff_u, 1e-5 * scale) << "output " << k << " against the unfolded path";
  }
}

// The linear schedule and its warm-up against the formulas of Ultralytics 8.4's trainer.
TEST(DetectRecipe, LinearScheduleAndWarmup) {
  optim::LrSchedule s;
  s.kind = "linear";
  s.lr = 0.01;
  s.lrf = 0.01;
  s.warmup_epochs = 3;
  s.warmup_bias_lr = 0.1;
  s.warmup_momentum = 0.8;
  s.validate();
  const int64_t nb = 125, E = 10;
  auto lf = [&](int64_t e) { return (1.0 - static_cast<double>(e) / E) * 0.99 + 0.01; };
  EXPECT_EQ(s.linear_warmup_steps(nb, E), 375);
  EXPECT_EQ(s.linear_warmup_steps(nb, 1), 0);  // min(3, epochs - 1) epochs
  EXPECT_DOUBLE_EQ(s.group_lr_at(0, nb, E, false), 0.0);
  EXPECT_DOUBLE_EQ(s.group_lr_at(0, nb, E, true), 0.1);
  EXPECT_NEAR(s.group_lr_at(200, nb, E, false), 0.01 * lf(1) * 200 / 375, 1e-15);
  EXPECT_NEAR(s.group_lr_at(200, nb, E, true), 0.1 + (0.01 * lf(1) - 0.1) * 200 / 375, 1e-15);
  EXPECT_NEAR(s.group_lr_at(375, nb, E, true), 0.01 * lf(3), 1e-15);
  EXPECT_NEAR(s.group_lr_at(1249, nb, E, false), 0.01 * lf(9), 1e-15);
  EXPECT_NEAR(s.lr_at(500, nb, E), 0.01 * lf(4), 1e-15);
  EXPECT_NEAR(s.momentum_at(0, nb, E, 0.937), 0.8, 1e-15);
  EXPECT_NEAR(s.momentum_at(150, nb, E, 0.937), 0.8 + 0.137 * 150 / 375, 1e-15);
  EXPECT_NEAR(s.momentum_at(400, nb, E, 0.937), 0.937, 1e-15);
}

// Gradient accumulation (--nbs) as Ultralytics 8.4.190's trainer: acc0 = max(round(nbs / batch), 1)
// capped at the run's batch count; over the warm-up accumulate ramps from 1 to acc0 (np.interp,
// rounded half to even), acc0 from its last step on and without a warm-up.
TEST(DetectRecipe, AccumulateAsUltralytics) {
  optim::LrSchedule s;
  s.kind = "linear";
  s.warmup_epochs = 3;
  const int64_t nb = 125, E = 10;               // nw = 375
  auto interp = [](int64_t ni, int64_t acc0) {  // np.interp(ni, [0, 375], [1, acc0]).round()
    return std::max<int64_t>(
        1, static_cast<int64_t>(std::nearbyint(static_cast<double>(acc0 - 1) / 375 * ni + 1)));
  };
  EXPECT_EQ(s.accumulate_at(0, nb, E, 64, 16), 1);
  EXPECT_EQ(s.accumulate_at(62, nb, E, 64, 16), 1);   // 1.496
  EXPECT_EQ(s.accumulate_at(63, nb, E, 64, 16), 2);   // 1.504
  EXPECT_EQ(s.accumulate_at(188, nb, E, 64, 16), 3);  // 2.504
  EXPECT_EQ(s.accumulate_at(374, nb, E, 64, 16), 4);  // 3.992
  EXPECT_EQ(s.accumulate_at(375, nb, E, 64, 16), 4);  // ni == nw: acc0
  EXPECT_EQ(s.accumulate_at(5000, nb, E, 64, 16), 4);
  // batch 24: acc0 = round(2.67) = 3, the ramp's end (not 64 / 24).
  for (int64_t ni : {0, 1, 50, 93, 94, 100, 187, 250, 281, 282, 374})
    EXPECT_EQ(s.accumulate_at(ni, nb, E, 64, 24), interp(ni, 3)) << ni;
  EXPECT_EQ(s.accumulate_at(94, nb, E, 64, 24), 2);  // 1.501
  EXPECT_EQ(s.accumulate_at(1000, nb, E, 64, 24), 3);
  EXPECT_EQ(s.accumulate_at(1000, nb, E, 64, 64), 1);
  EXPECT_EQ(s.accumulate_at(1000, nb, E, 64, 128), 1);  // round(0.5) = 0 -> 1
  EXPECT_EQ(s.accumulate_at(1000, nb, E, 0, 16), 1);    // nbs 0: off
  // No warm-up (a 1-epoch run, or another schedule): acc0, rounded half to even.
  EXPECT_EQ(s.accumulate_at(0, nb, 1, 64, 16), 4);
  EXPECT_EQ(s.accumulate_at(0, nb, 1, 5, 2), 2);  // round(2.5) = 2, as Python's
  EXPECT_EQ(s.accumulate_at(0, nb, 1, 7, 2), 4);  // round(3.5) = 4
  EXPECT_EQ(s.accumulate_at(0, 2, 1, 64, 4), 2);  // capped at the run's 2 batches
  s.kind = "cosine";
  EXPECT_EQ(s.accumulate_at(0, nb, E, 64, 24), 3);
}

// ModelEMA's ramp: the decay of update n is decay (1 - exp(-n / tau)).
TEST(DetectRecipe, EmaRampAsUltralytics) {
  nn::Linear lin(2, 1);
  Tensor w = lin.weight;
  w.copy_(Tensor::from_vector({1.f, 1.f}, {1, 2}));
  optim::EMA ema(lin, 0.9999, 2000);
  w.copy_(Tensor::from_vector({3.f, 3.f}, {1, 2}));
  ema.update(lin);
  const double d1 = 0.9999 * (1 - std::exp(-1.0 / 2000));
  ema.update(lin);
  const double d2 = 0.9999 * (1 - std::exp(-2.0 / 2000));
  const double after1 = d1 * 1 + (1 - d1) * 3, after2 = d2 * after1 + (1 - d2) * 3;
  ema.swap(lin);
  EXPECT_NEAR(lin.weight.to_vector()[0], after2, 1e-6);
}

// --optimizer auto and the nominal batch, with Ultralytics' numbers.
TEST(DetectRecipe, AutoOptimizerAndNominalBatch) {
  train::TrainConfig c;
  c.optimizer = "auto";
  c.batch_size = 64;
  c.epochs = 10;
  c.nbs = 64;
  c.weight_decay = 5e-4;
  auto r = train::resolve_optimizer(c, 8000, 10, 1);
  EXPECT_EQ(r.name, "AdamW");
  EXPECT_DOUBLE_EQ(r.lr, 0.000714);  // round(0.002 * 5 / 14, 6)
  EXPECT_DOUBLE_EQ(r.momentum, 0.9);
  EXPECT_DOUBLE_EQ(r.weight_decay, 5e-4);
  c.batch_size = 16;  // accumulate 4: 16 x 4 / 64
  EXPECT_DOUBLE_EQ(train::resolve_optimizer(c, 8000, 10, 1).weight_decay, 5e-4);
  c.batch_size = 128;
  EXPECT_DOUBLE_EQ(train::resolve_optimizer(c, 8000, 10, 1).weight_decay, 1e-3);
  c.batch_size = 24;  // accumulate round(2.67) = 3: 72 / 64
  EXPECT_DOUBLE_EQ(train::resolve_optimizer(c, 8000, 10, 1).weight_decay, 5e-4 * 72 / 64);
  c.batch_size = 64;
  c.epochs = 100;  // 125 x 100 steps > 10000
  r = train::resolve_optimizer(c, 8000, 10, 1);
  EXPECT_EQ(r.name, "SGD");
  EXPECT_DOUBLE_EQ(r.lr, 0.01);
  EXPECT_FALSE(r.note.empty());
  c.optimizer = "adamw";
  c.lr = 0.003;
  EXPECT_DOUBLE_EQ(train::resolve_optimizer(c, 8000, 10, 1).lr, 0.003);
}

// ---- the command on a tiny dataset ----------------------------------------------------------

// train (Ultralytics' defaults where not given), eval (the table, its last line, --json,
// --save-json) and predict (pictures, YOLO rows) of yolov8n on 64-pixel images; bad labels exit 2.
// A training split without a single object (no label files, or empty ones) is refused before
// anything is written: there is nothing to learn from (the run would end at mAP 0 silently).
TEST(DetectCli, TrainingWithoutOneLabelIsRefused) {
  TempDir tmp{"detect_nolabels"};
  const fs::path dir = tmp.path();
  write_tiny_detect(dir / "data", 4, 2);
  const std::string yaml = (dir / "data" / "data.yaml").string();
  const fs::path labels = dir / "data" / "labels" / "train";
  for (bool empty : {false, true}) {
    fs::remove_all(labels);
    fs::create_directories(labels);
    for (const char* name : {"000", "001", "002", "003"})
      if (empty || std::string(name) == "003")
        write_file(labels / (name + std::string(".txt")), "");
    RunResult r = run_hpcnet({"train", "--model", "yolov8n", "--data", yaml, "--imgsz", "64",
                              "--epochs", "1", "--out", (dir / "run").string()},
                             dir);
    expect_refused(r, empty ? "empty label files" : "no label files",
                   {"no labels found in " + yaml, "every image of train (4) has no objects",
                    "check " + labels.string() + "/", "nothing to train on"});
    EXPECT_FALSE(fs::exists(dir / "run"));
  }
}

TEST(DetectCli, TrainEvalPredictOnATinyDataset) {
  TempDir tmp{"detect_cli"};  // removed at the end
  const fs::path dir = tmp.path();
  write_tiny_detect(dir / "data", 8, 4);
  const std::string yaml = (dir / "data" / "data.yaml").string();
  RunResult r = run_hpcnet({"train",
                            "--model",
                            "yolov8n",
                            "--data",
                            yaml,
                            "--imgsz",
                            "64",
                            "--epochs",
                            "2",
                            "--batch-size",
                            "4",
                            "--workers",
                            "0",
                            "--threads",
                            "2",
                            "--log-every",
                            "1",
                            "--close-mosaic",
                            "1",
                            "--out",
                            (dir / "run").string()},
                           dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // Mosaic in epoch 1, closed for the last one.
  EXPECT_NE(r.out.find("epoch 2: Compose(RandomAffine(64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer: 'auto' chose AdamW(lr=0.001667"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% mAP50 "), std::string::npos) << r.out;  // "mAP50-95 0.02% mAP50 ..."
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  // The file records the input scaling the model was trained with: pixels / 255, no mean or std
  // (it recorded the classifiers' 0.5 / 0.5 before).
  EXPECT_EQ(load_safetensors((dir / "run" / "model.safetensors").string())
                .metadata.at("hpcnet.normalize"),
            "{\"mean\":[0.0,0.0,0.0],\"std\":[1.0,1.0,1.0]}");
  // Every number of a detection epoch reaches metrics.csv: the loss parts (train and val), whose
  // sum is the loss, and the four metrics in percent.
  const std::vector<std::string> csv = split_lines(read_file(dir / "run" / "metrics.csv"));
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[0],
            "epoch,step,time,train_loss,train_box_loss,train_cls_loss,train_dfl_loss,val_loss,"
            "val_box_loss,val_cls_loss,val_dfl_loss,val_map50_95,val_map50,val_precision,"
            "val_recall,lr,seconds,images_per_sec");
  nlohmann::json last_epoch;
  for (const std::string& line : split_lines(read_file(dir / "run" / "metrics.jsonl"))) {
    const auto rec = nlohmann::json::parse(line);
    if (rec["event"] == "start") EXPECT_EQ(rec.at("metric_unit"), "percent");
    if (rec["event"] != "epoch") continue;
    SCOPED_TRACE(line);
    for (const char* split : {"train_", "val_"}) {
      double parts = 0;
      for (const char* part : {"box_loss", "cls_loss", "dfl_loss"})
        parts += rec.at(split + std::string(part)).get<double>();
      const double loss = rec.at(split + std::string("loss")).get<double>();
      EXPECT_GT(loss, 0);
      EXPECT_NEAR(parts, loss, 1e-5 * loss);
    }
    for (const char* k : {"val_map50_95", "val_map50", "val_precision", "val_recall"})
      EXPECT_TRUE(rec.at(k).is_number());
    last_epoch = rec;
  }
  const std::string w = (dir / "run" / "model.safetensors").string();
  // The recipe saved is Ultralytics' where not given.
  const auto start =
      nlohmann::json::parse(split_lines(read_file(dir / "run" / "metrics.jsonl"))[0]);
  EXPECT_EQ(start["config"]["optimizer"], "auto");
  EXPECT_EQ(start["config"]["lr_schedule"], "linear");
  EXPECT_EQ(start["config"]["ema_tau"], 2000.0);
  EXPECT_EQ(start["config"]["dataset"], "detect");
  EXPECT_EQ(start["config"]["mosaic"], 1.0);

  r = run_hpcnet({"eval", "--weights", w, "--data", yaml, "--split", "val", "--save-json",
                  (dir / "res.json").string()},
                 dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto lines = split_lines(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("val: mAP50-95: ", 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find("% mAP50: "), std::string::npos) << lines.back();
  EXPECT_NE(r.out.find("Instances"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Average Precision  (AP) @[ IoU=0.50:0.95"), std::string::npos) << r.out;
  const auto res = nlohmann::json::parse(read_file(dir / "res.json"));
  ASSERT_TRUE(res.is_array());
  for (const auto& x : res) {  // categories 1..nc, as Ultralytics numbers a YOLO dataset's
    EXPECT_TRUE(x.contains("bbox"));
    EXPECT_LT(x["image_id"].get<int64_t>(), 4);
    EXPECT_GE(x["category_id"].get<int64_t>(), 1);
    EXPECT_LE(x["category_id"].get<int64_t>(), 2);
  }
  r = run_hpcnet({"eval", "--weights", w, "--data", yaml, "--split", "val", "--json"}, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(split_lines(r.out).back());
  EXPECT_TRUE(j.contains("map50_95") && j.contains("coco") && j.contains("per_class")) << r.out;
  // --json as metrics.jsonl: the last epoch's validation of the same weights.
  EXPECT_NEAR(j.at("map50_95").get<double>(), last_epoch.at("val_map50_95").get<double>(), 1e-6);
  EXPECT_NEAR(j.at("map50").get<double>(), last_epoch.at("val_map50").get<double>(), 1e-6);
  {
    // Units: with whole-image boxes as the val labels, which the untrained model's wide boxes
    // (clipped to the image) match, the mAP is far from 0; --json gives percent, 100 x the
    // fractions of Ultralytics' table (3 significant digits), pycocotools' AP likewise.
    for (const auto& e : fs::directory_iterator(dir / "data" / "labels" / "val"))
      write_file(e.path(), "0 0.5 0.5 1 1\n");
    r = run_hpcnet({"eval", "--weights", w, "--data", yaml, "--split", "val"}, dir);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<double> table;  // "all": images, instances, P, R, mAP50, mAP50-95
    for (const std::string& l : split_lines(r.out)) {
      std::istringstream in(l);
      std::string first;
      in >> first;
      if (first != "all") continue;
      for (double v; in >> v;) table.push_back(v);
    }
    ASSERT_EQ(table.size(), 6u) << r.out;
    ASSERT_GT(table[5], 0.01) << "a zero mAP cannot tell a fraction from a percentage: " << r.out;
    RunResult rj =
        run_hpcnet({"eval", "--weights", w, "--data", yaml, "--split", "val", "--json"}, dir);
    ASSERT_EQ(rj.rc, 0) << rj.err;
    const auto u = nlohmann::json::parse(split_lines(rj.out).back());
    for (auto [key, col] : {std::pair<const char*, int>{"precision", 2},
                            {"recall", 3},
                            {"map50", 4},
                            {"map50_95", 5}})
      EXPECT_NEAR(u.at(key).get<double>(), 100 * table[col], 0.6 * table[col]) << key << r.out;
    EXPECT_NEAR(u.at("coco").at("AP").get<double>(), u.at("map50_95").get<double>(), 1e-9);
    char last[96];
    std::snprintf(last, sizeof last, "val: mAP50-95: %.2f%% mAP50: %.2f%%",
                  u.at("map50_95").get<double>(), u.at("map50").get<double>());
    EXPECT_EQ(split_lines(r.out).back(), last);
  }
  // Without --split: the data.yaml has no test split, so eval takes val and says so.
  r = run_hpcnet({"eval", "--weights", w, "--data", yaml}, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("eval: " + yaml + " has no test split; evaluating val"), std::string::npos)
      << r.err;
  EXPECT_EQ(split_lines(r.out).back().rfind("val: mAP50-95: ", 0), 0u) << r.out;

  r = run_hpcnet({"predict", "--weights", w, "--conf", "0.0001", "--save", (dir / "pred").string(),
                  (dir / "data" / "images" / "val").string()},
                 dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(dir / "pred" / "000_boxes.png"));
  EXPECT_TRUE(fs::exists(dir / "pred" / "000.txt"));
  const auto rows = split_lines(read_file(dir / "pred" / "000.txt"));
  ASSERT_FALSE(rows.empty());  // at conf 0.0001 something is found
  EXPECT_EQ(std::count(rows[0].begin(), rows[0].end(), ' '), 5) << rows[0];

  // A class past the names: one line naming FILE:LINE, exit 2.
  write_file(dir / "data" / "labels" / "train" / "001.txt",
             "0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\n");
  r = run_hpcnet({"train", "--model", "yolov8n", "--data", yaml, "--imgsz", "64", "--epochs", "1",
                  "--out", (dir / "run2").string()},
                 dir);
  expect_refused(r, "bad class", {"001.txt:2"});
}

// Deferred loss reads (what a GPU does; HPCNET_DEFER_LOSS=1 here) carry detect's three parts with
// its loss: the same loss lines, the same per-epoch parts and the same weights, bit for bit, as
// reading them after every step.
TEST(DetectCli, DeferredLossReadsGiveTheSameRunWithItsParts) {
  TempDir tmp{"detect_defer"};
  const fs::path dir = tmp.path();
  write_tiny_detect(dir / "data", 8, 4);
  auto train = [&](const char* defer, const std::string& out) {
    std::vector<std::string> args = {"train", "--model", "yolov8n", "--data",
                                     (dir / "data" / "data.yaml").string(), "--imgsz", "64",
                                     "--epochs", "2", "--batch-size", "4", "--workers", "0",
                                     "--threads", "2", "--log-every", "1", "--out",
                                     (dir / out).string()};
    const std::string env = std::string("HPCNET_DEFER_LOSS=") + defer + " ";
    return run_shell(hpcnet_command_line(args, dir, env));
  };
  RunResult now = train("0", "now"), later = train("1", "later");
  ASSERT_EQ(now.rc, 0) << now.err;
  ASSERT_EQ(later.rc, 0) << later.err;
  auto records = [&](const std::string& out) {
    std::vector<nlohmann::json> v;
    for (const std::string& line : split_lines(read_file(dir / out / "metrics.jsonl"))) {
      auto rec = nlohmann::json::parse(line);
      if (rec["event"] == "start") {
        v.push_back(rec["deferred_loss_reads"]);
        continue;
      }
      if (rec["event"] == "log") v.push_back(rec["loss"]);
      if (rec["event"] == "epoch")
        for (const char* k : {"train_loss", "train_box_loss", "train_cls_loss", "train_dfl_loss"})
          v.push_back(rec.at(k));
    }
    return v;
  };
  const auto a = records("now"), b = records("later");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.front(), false);
  EXPECT_EQ(b.front(), true);
  for (size_t k = 1; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << "record value " << k;
  EXPECT_GT(a.size(), 9u);  // the start, 4 loss lines, 2 epochs of 4 numbers
  EXPECT_EQ(read_file(dir / "later" / "model.safetensors"),
            read_file(dir / "now" / "model.safetensors"));
}
