// yolov8n against Ultralytics 8.4's DetectionModel("yolov8n.yaml", nc=10) and v8DetectionLoss
// (tests/golden/yolo_golden.safetensors and yolov8_state_dict.json, written by
// tests/golden/make_golden_yolo.py; both sides fill every tensor from the same formula, the DFL
// integral excepted). Checked: names, shapes and counts of yolov8n and yolov8s; the raw head
// outputs in training mode; the assigner's targets, the three loss components and the gradients
// of the outputs and of parameters; BatchNorm statistics; the eval-mode decoded predictions; and
// the ops' values and gradients on the fixture's CIoU, DFL and BCE cases. Tolerances are stated
// at each check (relative to the largest reference value; float32 through ~60 convolutions).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "src/task/detect/yolo_loss.h"
#include "test_util.h"
#include "yolo_fixture.h"

using namespace hpcnet;
using test_util::fill_from_formula;
using test_util::rel_err;
namespace det = hpcnet::task::detect;

namespace {

const SafetensorsFile& golden() {
  static SafetensorsFile f =
      load_safetensors(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/yolo_golden.safetensors");
  return f;
}

std::shared_ptr<nn::Module> formula_yolo() {
  auto m = nn::make_model("yolov8n", nn::ModelOptions{10});
  for (auto& [name, t] : m->state_dict())
    if (name != "model.22.dfl.conv.weight") fill_from_formula(name, t);
  return m;
}

// Level l of a (B, C, A) tensor as (B, C, h, w) for a 64x64 input.
Tensor level(const Tensor& t, int l) {
  const int64_t sizes[3] = {8, 4, 2}, starts[3] = {0, 64, 80};
  return F::reshape(F::narrow(t, 2, starts[l], sizes[l] * sizes[l]),
                    {t.size(0), t.size(1), sizes[l], sizes[l]});
}

// The fixture's targets (normalised xywh) as Ultralytics' preprocess makes them: xyxy pixels.
std::vector<det::ImageTargets> fixture_targets() {
  return test_util::yolo_fixture_targets(golden());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

TEST(YoloGolden, NamesShapesAndCountsAreUltralytics) {
  std::ifstream in(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/yolov8_state_dict.json");
  const auto j = nlohmann::json::parse(in);
  for (const char* name : {"yolov8n", "yolov8s"}) {
    SCOPED_TRACE(name);
    auto m = nn::make_model(name, nn::ModelOptions{10});
    const auto& ref = j["models"][name];
    EXPECT_EQ(m->num_parameters(), ref["parameters"].get<int64_t>());
    std::map<std::string, Shape> ours, theirs;
    for (auto& [n, t] : m->state_dict()) ours[n] = t.shape();
    for (const auto& e : ref["state_dict"]) theirs[e[0].get<std::string>()] = e[1].get<Shape>();
    EXPECT_EQ(ours.size(), theirs.size());
    for (auto& [n, s] : theirs) {
      auto it = ours.find(n);
      if (it == ours.end()) {
        ADD_FAILURE() << "missing " << n;
        continue;
      }
      EXPECT_EQ(it->second, s) << n;
    }
    for (auto& [n, t] : m->named_parameters())
      EXPECT_EQ(t.requires_grad(), n != "model.22.dfl.conv.weight") << n;
  }
  // Ultralytics' bias_init: box 2.0, class log(5 / nc / (640 / 8)^2) at stride 8.
  auto m = nn::make_model("yolov8n", nn::ModelOptions{10});
  for (auto& [n, t] : m->named_parameters()) {
    if (n == "model.22.cv2.0.2.bias") EXPECT_FLOAT_EQ(t.to_vector()[5], 2.0f);
    if (n == "model.22.cv3.0.2.bias")
      EXPECT_NEAR(t.to_vector()[3], std::log(5.0 / 10 / (80.0 * 80.0)), 1e-6);
  }
}

TEST(YoloGolden, TrainOutputsLossAssignmentAndGradientsMatchUltralytics) {
  const SafetensorsFile& g = golden();
  auto m = formula_yolo();
  m->train();
  nn::Outputs out = m->forward_all(g.at("input"));
  ASSERT_EQ(out.size(), 2u);
  // Raw outputs: 1e-4 of the largest (float32 error measured against float64: 1.1e-5).
  for (int l = 0; l < 3; ++l) {
    Tensor ref = g.at("out." + std::to_string(l));
    EXPECT_LT(rel_err(level(out[0], l), F::narrow(ref, 1, 0, 64)), 1e-4) << "boxes level " << l;
    EXPECT_LT(rel_err(level(out[1], l), F::narrow(ref, 1, 64, 10)), 1e-4) << "scores level " << l;
  }
  // BatchNorm running statistics after the forward: 1e-5 relative.
  for (const char* bn : {"model.0.bn", "model.8.m.0.cv2.bn", "model.22.cv3.2.1.bn"})
    for (auto& [n, t] : m->named_buffers()) {
      if (n == std::string(bn) + ".running_mean")
        EXPECT_LT(rel_err(t, g.at(std::string("running_mean.") + bn)), 1e-5) << n;
      if (n == std::string(bn) + ".running_var")
        EXPECT_LT(rel_err(t, g.at(std::string("running_var.") + bn)), 1e-5) << n;
    }

  // The loss on leaf copies of the outputs: the assignment, the items and d total / d outputs.
  Tensor boxes = out[0].detach().clone(), scores = out[1].detach().clone();
  boxes.set_requires_grad(true);
  scores.set_requires_grad(true);
  det::LossResult r = det::v8_detection_loss(boxes, scores, 64, 64, fixture_targets());
  const det::Assignment& as = r.assignment;
  auto fg = g.at("tal.fg_mask").to_vector();
  auto tgt_idx = g.at("tal.target_gt_idx").to_vector_f64();
  auto tlab = g.at("tal.target_labels").to_vector_f64();
  auto tsc = g.at("tal.target_scores").to_vector();
  auto tbb = g.at("tal.target_bboxes").to_vector();
  int n_fg = 0;
  for (int64_t i = 0; i < 2 * 84; ++i) {
    EXPECT_EQ(as.fg[i], fg[i] > 0.5f) << "fg anchor " << i;
    n_fg += as.fg[i];
    if (!as.fg[i]) continue;
    EXPECT_EQ(as.gt_idx[i], static_cast<int64_t>(tgt_idx[i])) << "gt of anchor " << i;
    EXPECT_EQ(as.labels[i], static_cast<int64_t>(tlab[i])) << "label of anchor " << i;
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(as.bboxes[4 * i + c], tbb[4 * i + c], 1e-4);
  }
  EXPECT_EQ(n_fg, 38);
  // Target scores: 1e-4 of the largest (products of pow(score, 0.5) pow(ciou, 6) in float32).
  double d = 0, mx = 0;
  for (size_t i = 0; i < tsc.size(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(as.scores[i] - tsc[i])));
    mx = std::max(mx, static_cast<double>(std::abs(tsc[i])));
  }
  EXPECT_LT(d / mx, 1e-4) << "target scores";
  auto items = g.at("loss.items").to_vector(), total = g.at("loss.total").to_vector();
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(r.items()[k], items[k], 2e-5 * std::abs(items[k])) << k;
  EXPECT_NEAR(r.total.item(), total[0] + total[1] + total[2],
              2e-5 * (total[0] + total[1] + total[2]));
  r.total.backward();
  for (int l = 0; l < 3; ++l) {
    Tensor ref = g.at("grad.out." + std::to_string(l));
    EXPECT_LT(rel_err(level(boxes.grad(), l), F::narrow(ref, 1, 0, 64)), 1e-3) << "dboxes " << l;
    EXPECT_LT(rel_err(level(scores.grad(), l), F::narrow(ref, 1, 64, 10)), 1e-3)
        << "dscores " << l;
  }

  // Through the whole model: every trainable parameter's gradient norm to 2e-3 relative (float32
  // error measured: 2e-4), the listed gradients to 2e-3 of their largest element.
  det::LossResult full = det::v8_detection_loss(out[0], out[1], 64, 64, fixture_targets());
  full.total.backward();
  int norms = 0;
  for (auto& [name, p] : m->named_parameters()) {
    if (!p.requires_grad()) continue;
    const double want = g.at("grad_norm." + name).item();
    const auto gv = p.grad().to_vector_f64();
    double got = 0;
    for (double v : gv) got += v * v;
    EXPECT_NEAR(std::sqrt(got), want, 2e-3 * want + 1e-9) << name;
    ++norms;
  }
  EXPECT_EQ(norms, 183);
  for (const std::string& n : g.order) {
    if (n.rfind("grad.model", 0) != 0) continue;
    const std::string pname = n.substr(5);
    for (auto& [name, p] : m->named_parameters())
      if (name == pname) {
        const Tensor& ref = g.at(n);
        const double scale = max_abs(ref.to_vector_f64());
        if (scale < 1e-8) continue;  // the stride-32 box bias: ~1e-10, below float32 noise
        EXPECT_LT(rel_err(p.grad(), ref), 2e-3) << name;
      }
  }
}

TEST(YoloGolden, EvalPredictionsMatchUltralytics) {
  const SafetensorsFile& g = golden();
  auto m = formula_yolo();
  m->eval();
  nn::Outputs out;
  {
    NoGradGuard ng;
    out = m->forward_all(g.at("input"));
  }
  for (int l = 0; l < 3; ++l)
    EXPECT_LT(rel_err(level(out[1], l), F::narrow(g.at("out_eval." + std::to_string(l)), 1, 64, 10)),
              1e-5);
  // Decoded (B, 14, A): xywh pixels and sigmoid scores, 1e-5 of the largest (measured 9e-7).
  EXPECT_LT(rel_err(det::decode_predictions(out[0], out[1], 64, 64), g.at("pred_eval")), 1e-5);
  const det::Anchors a = det::make_anchors(64, 64);
  auto ref = g.at("decode.anchors").to_vector(), rs = g.at("decode.strides").to_vector();
  ASSERT_EQ(a.size(), 84);
  for (int64_t i = 0; i < 84; ++i) {
    EXPECT_EQ(a.xy[2 * i], ref[2 * i]);
    EXPECT_EQ(a.xy[2 * i + 1], ref[2 * i + 1]);
    EXPECT_EQ(a.stride[i], rs[i]);
  }
}

TEST(YoloGolden, LossOpsMatchUltralyticsInFloat64) {
  const SafetensorsFile& g = golden();
  // CIoU: value and d sum(1 - ciou) / d box1 (alpha held constant), 1e-10.
  Tensor b1 = g.at("ciou.box1").clone(), b2 = g.at("ciou.box2");
  b1.set_requires_grad(true);
  const int64_t M = b1.size(0);
  Tensor loss = F::ciou_loss(b1, b2, Tensor::full({M}, 1.0, DType::kFloat64));
  auto v = g.at("ciou.value").to_vector_f64();
  double want = 0;
  for (double x : v) want += 1 - x;
  EXPECT_NEAR(loss.item(), want, 1e-10);
  loss.backward();
  auto got = b1.grad().to_vector_f64(), ref = g.at("ciou.grad1").to_vector_f64();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-9) << "ciou grad " << i;
  // DFL per row (weight 1) and its gradient.
  Tensor p = g.at("dfl.pred").clone();
  p.set_requires_grad(true);
  Tensor dl = F::dfl_loss(p, g.at("dfl.target"), Tensor::full({p.size(0)}, 1.0, DType::kFloat64));
  double dsum = 0;
  for (double x : g.at("dfl.value").to_vector_f64()) dsum += x;
  EXPECT_NEAR(dl.item(), dsum, 1e-10);
  dl.backward();
  EXPECT_LT(rel_err(p.grad(), g.at("dfl.grad")), 1e-10);
  // BCE with logits, summed.
  Tensor x = g.at("bce.logits").clone();
  x.set_requires_grad(true);
  Tensor bl = F::bce_with_logits(x, g.at("bce.targets"));
  EXPECT_NEAR(bl.item(), g.at("bce.value").item(), 1e-10);
  bl.backward();
  EXPECT_LT(rel_err(x.grad(), g.at("bce.grad")), 1e-10);
}
