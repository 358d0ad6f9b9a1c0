// unet_resnet50 against segmentation_models_pytorch's Unet("resnet50", encoder_weights=None,
// classes=11) (tests/golden/unet_resnet50_golden.safetensors, written by
// tests/golden/make_golden_unet.py resnet50: both sides fill every tensor from the formula of
// test_util::fill_from_formula, so the fixture holds no weights). Checked: the parameter names and
// count; a training step (logits, loss, gradients, running statistics); an eval-mode forward and a
// backward from a fixed upstream gradient (every gradient's norm, ten full gradients).
//
// This net is badly conditioned in float32 (the fixture script's RESNET50_DOC says why): in
// training mode BatchNorm over the 4 values per channel of layer4's 2x2 maps cancels most of the
// encoder's gradient; in eval mode the formula's running statistics leave the residual sums
// unnormalised (logits up to 1.2e8), and the gradients of layers 1-3 hinge on the summation order.
// So tolerances (relative to the largest reference value unless noted) were set from the worst of
// four variants of torch against the fixture (float32 on 2 threads, channels_last, mkldnn off, and
// float64), in brackets, with hpcnet's own error (AVX-512 machine, 2 threads) in parentheses:
//   training mode (batch statistics)
//     logits 1e-2 [5.4e-3 channels_last] (1.7e-4); loss 5e-4 relative [2.1e-4] (6.4e-6)
//     full gradients of decoder.blocks.4.conv2.0 and the head 1e-2 [3.1e-3] (2.6e-4)
//     gradient norms, relative: decoder and head 0.3 [0.19] (7.9e-3); encoder 2 [1.2] (0.39):
//       a sanity check only; the decoder's and head's median 0.05 (9.1e-4; clang sanitizer
//       build 1.4e-3), the encoder's none (0.29; clang sanitizer build 0.90; torch 0.55)
//     running statistics: encoder.bn1, layer1.0.bn3 1e-5 [2.8e-7] (3.1e-7); layer3.1.bn2 1e-4
//       [2.9e-5] (4.2e-6); layer4.2.bn2 0.15 [8.5e-2] (1.4e-3); decoder.blocks.2 1e-2 [2.9e-3]
//       (8e-5)
//   eval mode (running statistics), backward from dy = 1e-3 sin(0.53 i)
//     logits 1e-4 [6.4e-6] (3.9e-6)
//     every gradient norm 3e-2 relative [1.1e-2, 2 threads; float64 2e-6] (1.1e-2), their median
//       1e-2 [4.1e-3]; ten full gradients 3e-2 [1.1e-2] (1.1e-2)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "test_util.h"

using namespace hpcnet;

namespace {

using test_util::fill_from_formula;
using test_util::l2_norm;
using test_util::median_of;
using test_util::rel_err;

constexpr int64_t kParams = 32522555;  // smp.Unet("resnet50", classes=11)

const SafetensorsFile& golden() {
  static SafetensorsFile f = load_safetensors(std::string(HPCNET_SOURCE_DIR) +
                                              "/tests/golden/unet_resnet50_golden.safetensors");
  return f;
}

std::shared_ptr<nn::Module> formula_unet50() {
  auto m = nn::make_model("unet_resnet50", nn::ModelOptions{11});
  for (auto& [name, t] : m->state_dict()) fill_from_formula(name, t);
  return m;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}


}  // namespace

TEST(UnetResnet50Golden, ParameterNamesAndCountAreSmps) {
  const SafetensorsFile& g = golden();
  EXPECT_EQ(g.metadata.at("parameters"), std::to_string(kParams));
  auto m = nn::make_model("unet_resnet50", nn::ModelOptions{11});
  EXPECT_EQ(m->num_parameters(), kParams);
  std::set<std::string> ours, smp;
  for (auto& [n, t] : m->named_parameters()) ours.insert(n);
  for (const std::string& n : g.order)
    if (starts_with(n, "grad_norm.")) smp.insert(n.substr(10));
  EXPECT_EQ(smp.size(), 191u);
  EXPECT_EQ(ours, smp);
  // smp's UnetDecoder over channels 64, 256, 512, 1024, 2048: block 0 reads 2048 + 1024.
  for (auto& [n, t] : m->named_parameters()) {
    if (n == "decoder.blocks.0.conv1.0.weight") EXPECT_EQ(t.shape(), (Shape{256, 3072, 3, 3}));
    if (n == "decoder.blocks.3.conv1.0.weight") EXPECT_EQ(t.shape(), (Shape{32, 128, 3, 3}));
    if (n == "encoder.layer4.0.downsample.0.weight")
      EXPECT_EQ(t.shape(), (Shape{2048, 1024, 1, 1}));
  }
  const nn::ModelInfo& info = nn::model_info("unet_resnet50");
  EXPECT_EQ(info.task, "segment");
  EXPECT_EQ(info.imgsz, 128);
  EXPECT_EQ(info.size_multiple, 32);
}

TEST(UnetResnet50Golden, TrainingStepMatchesSmp) {
  const SafetensorsFile& g = golden();
  auto m = formula_unet50();
  m->train();
  Tensor logits = m->forward(g.at("input"));
  const double el = rel_err(logits, g.at("logits_train"));
  EXPECT_LT(el, 1e-2);
  Tensor loss = F::cross_entropy2d(logits, g.at("target"), Tensor(), 255);
  const double want = g.at("loss").item();
  EXPECT_NEAR(loss.item(), want, 5e-4 * want);
  loss.backward();
  std::vector<double> errs;
  double worst_head = 0, worst_encoder = 0;
  for (auto& [name, p] : m->named_parameters()) {
    const double w = g.at("grad_norm." + name).item();
    const double err = std::abs(l2_norm(p.grad()) - w) / w;
    const bool encoder = starts_with(name, "encoder.");
    EXPECT_LT(err, encoder ? 2.0 : 0.3) << name;
    (encoder ? worst_encoder : worst_head) = std::max(encoder ? worst_encoder : worst_head, err);
    errs.push_back(err);
  }
  EXPECT_EQ(errs.size(), 191u);
  // The median over the decoder and head only: the encoder's training-mode gradients are chaotic
  // in float32 (their median error is 0.29 in the Release build and 0.90 in the clang sanitizer
  // build, torch's own variants 0.55), the decoder's and head's are not (9.1e-4 and 1.4e-3).
  std::vector<double> head_errs;
  size_t k = 0;
  for (auto& [name, p] : m->named_parameters()) {
    if (!starts_with(name, "encoder.")) head_errs.push_back(errs[k]);
    ++k;
  }
  EXPECT_LT(median_of(head_errs), 0.05);
  double worst_full = 0;
  int full = 0;
  for (auto& [name, p] : m->named_parameters())
    if (g.contains("grad." + name)) {
      const double e = rel_err(p.grad(), g.at("grad." + name));
      EXPECT_LT(e, 1e-2) << name;
      worst_full = std::max(worst_full, e);
      ++full;
    }
  EXPECT_EQ(full, 3);
  std::map<std::string, Tensor> buffers;
  for (auto& [n, b] : m->named_buffers()) buffers[n] = b;
  const std::vector<std::pair<std::string, double>> stats = {{"encoder.bn1", 1e-5},
                                                             {"encoder.layer1.0.bn3", 1e-5},
                                                             {"encoder.layer3.1.bn2", 1e-4},
                                                             {"encoder.layer4.2.bn2", 0.15},
                                                             {"decoder.blocks.2.conv1.1", 1e-2}};
  std::string stat_errs;
  for (const auto& [bn, tol] : stats)
    for (const char* s : {"running_mean", "running_var"}) {
      const std::string key = bn + "." + s;
      ASSERT_TRUE(buffers.count(key)) << key;
      const double e = rel_err(buffers[key], g.at(std::string(s) + "." + bn));
      EXPECT_LT(e, tol) << key;
      char b[96];
      std::snprintf(b, sizeof b, " %s.%s %.2g", bn.c_str(), s, e);
      stat_errs += b;
    }
  std::printf(
      "[ golden   ] unet_resnet50 train: logits %.2g, loss %.2g, full grads %.2g, norms: "
      "decoder/head %.2g, encoder %.2g, median %.2g; stats%s\n",
      el, std::abs(loss.item() - want) / want, worst_full, worst_head, worst_encoder, median_of(errs),
      stat_errs.c_str());

  // Against exact arithmetic (float64, tests/golden/unet_resnet50_f64.safetensors).
  static SafetensorsFile f64 = load_safetensors(std::string(HPCNET_SOURCE_DIR) +
                                                "/tests/golden/unet_resnet50_f64.safetensors");
  const double el64 = rel_err(logits, f64.at("logits_train"));
  std::vector<double> enc64, dec64;
  for (auto& [name, p] : m->named_parameters()) {
    const double w = f64.at("grad_norm." + name).to_vector_f64()[0];
    (starts_with(name, "encoder.") ? enc64 : dec64).push_back(std::abs(l2_norm(p.grad()) - w) / w);
  }
  // torch's float32 is off float64 by 1.5e-3 (logits), a median 2.3e-2 (encoder's norms, up to
  // 1.41) and 4.3e-3 (decoder's and head's); hpcnet by 1.6e-3, 0.17 and 4.6e-3 (the encoder's
  // median 10x torch's: not BatchNorm, whose float64 forward and backward leave it there).
  EXPECT_LT(el64, 5e-3);
  EXPECT_LT(median_of(dec64), 2e-2);
  EXPECT_LT(median_of(enc64), 0.5);
  std::printf("[ golden   ] unet_resnet50 train against float64: logits %.3g; gradient norms: "
              "encoder median %.3g max %.3g, decoder and head median %.3g max %.3g\n",
              el64, median_of(enc64), *std::max_element(enc64.begin(), enc64.end()),
              median_of(dec64), *std::max_element(dec64.begin(), dec64.end()));
}

TEST(UnetResnet50Golden, EvalForwardAndBackwardMatchSmp) {
  const SafetensorsFile& g = golden();
  auto m = formula_unet50();
  m->eval();
  Tensor logits = m->forward(g.at("input"));
  const double el = rel_err(logits, g.at("logits_eval"));
  EXPECT_LT(el, 1e-4);
  // d sum(logits * dy) / d params, dy = 1e-3 sin(0.53 i) (the eval logits reach 1.2e8).
  std::vector<float> dy(static_cast<size_t>(logits.numel()));
  for (size_t i = 0; i < dy.size(); ++i)
    dy[i] = static_cast<float>(1e-3 * std::sin(0.53 * static_cast<double>(i)));
  logits.backward(Tensor::from_vector(dy, logits.shape()));
  double worst_full = 0;
  std::vector<double> errs;
  int full = 0;
  for (auto& [name, p] : m->named_parameters()) {
    const double want = g.at("grad_norm_eval." + name).item();
    const double err = std::abs(l2_norm(p.grad()) - want) / want;
    EXPECT_LT(err, 3e-2) << name;
    errs.push_back(err);
    if (g.contains("grad_eval." + name)) {
      const double e = rel_err(p.grad(), g.at("grad_eval." + name));
      EXPECT_LT(e, 3e-2) << name;
      worst_full = std::max(worst_full, e);
      ++full;
    }
  }
  EXPECT_EQ(errs.size(), 191u);
  EXPECT_LT(median_of(errs), 1e-2);
  EXPECT_EQ(full, 10);
  std::printf(
      "[ golden   ] unet_resnet50 eval: logits %.2g, gradient norms %.2g (median %.2g), full "
      "%.2g\n",
      el, *std::max_element(errs.begin(), errs.end()), median_of(errs), worst_full);
}
