// unet_resnet18 against segmentation_models_pytorch's Unet("resnet18", encoder_weights=None,
// classes=11) (tests/golden/unet_golden.safetensors, written by tests/golden/make_golden_unet.py:
// both sides fill every tensor from the same formula, so the fixture holds no weights). Checked:
// the parameter names and count, the training-mode logits, the per-pixel cross-entropy with
// ignored pixels, every parameter's gradient norm and nine full gradients, the running statistics
// after the forward, and the eval-mode logits. Tolerances are relative to the largest reference
// value (float32 through 30 convolutions and batch norms): stated at each check.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "test_util.h"

using namespace hpcnet;

namespace {

const SafetensorsFile& unet_golden() {
  static SafetensorsFile f =
      load_safetensors(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/unet_golden.safetensors");
  return f;
}

using test_util::fill_from_formula;
using test_util::rel_err;

std::shared_ptr<nn::Module> formula_unet() {
  auto m = nn::make_model("unet_resnet18", nn::ModelOptions{11});
  for (auto& [name, t] : m->state_dict()) fill_from_formula(name, t);
  return m;
}

}  // namespace

TEST(UnetGolden, ParameterNamesAndCountAreSmps) {
  auto m = nn::make_model("unet_resnet18", nn::ModelOptions{11});
  EXPECT_EQ(m->num_parameters(), 14329659);  // smp.Unet("resnet18", classes=11)
  std::set<std::string> ours, smp;
  for (auto& [n, t] : m->named_parameters()) ours.insert(n);
  for (const std::string& n : unet_golden().order)
    if (n.rfind("grad_norm.", 0) == 0) smp.insert(n.substr(10));
  EXPECT_EQ(ours, smp);
  for (const char* bn : {"encoder.bn1", "encoder.layer3.1.bn2", "decoder.blocks.2.conv1.1"}) {
    bool found = false;
    for (auto& [n, t] : m->named_buffers()) found = found || n == std::string(bn) + ".running_var";
    EXPECT_TRUE(found) << bn;
  }
  EXPECT_EQ(nn::make_model("unet_resnet34", nn::ModelOptions{11})->num_parameters(),
            24437819);  // smp, resnet34
}

TEST(UnetGolden, TrainForwardLossGradientsAndEvalMatchSmp) {
  const SafetensorsFile& g = unet_golden();
  auto m = formula_unet();
  m->train();
  Tensor logits = m->forward(g.at("input"));
  // Training-mode logits: 1e-4 of the largest logit.
  EXPECT_LT(rel_err(logits, g.at("logits_train")), 1e-4);
  Tensor loss = F::cross_entropy2d(logits, g.at("target"), Tensor(), 255);
  EXPECT_NEAR(loss.item(), g.at("loss").item(), 1e-5 * std::abs(g.at("loss").item()));
  loss.backward();
  // Gradients: each parameter's norm to 2e-3 relative (1e-3 held on AVX-512 machines; on an
  // AVX2-only CPU oneDNN's other convolution kernels put decoder.blocks.0.conv2.1.weight's at
  // 1.2e-3), the full gradients to 1e-3 of their largest element.
  int norms = 0;
  for (auto& [name, p] : m->named_parameters()) {
    const double want = g.at("grad_norm." + name).item();
    double got = 0;
    for (double v : p.grad().to_vector_f64()) got += v * v;
    got = std::sqrt(got);
    EXPECT_NEAR(got, want, 2e-3 * want + 1e-7) << name;
    ++norms;
  }
  EXPECT_EQ(norms, 92);
  for (const std::string& n : g.order) {
    if (n.rfind("grad.", 0) != 0) continue;
    for (auto& [name, p] : m->named_parameters())
      if ("grad." + name == n) EXPECT_LT(rel_err(p.grad(), g.at(n)), 1e-3) << n;
  }
  // Running statistics after one training forward (momentum 0.1).
  for (auto& [name, b] : m->named_buffers())
    if (g.contains("running_mean." + name.substr(0, name.rfind('.'))) && name.size() > 13 &&
        name.compare(name.size() - 13, 13, ".running_mean") == 0)
      EXPECT_LT(rel_err(b, g.at("running_mean." + name.substr(0, name.size() - 13))), 1e-5) << name;
  for (auto& [name, b] : m->named_buffers())
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".running_var") == 0 &&
        g.contains("running_var." + name.substr(0, name.size() - 12)))
      EXPECT_LT(rel_err(b, g.at("running_var." + name.substr(0, name.size() - 12))), 1e-5) << name;
  // Eval mode with the formula's running statistics.
  auto e = formula_unet();
  e->eval();
  NoGradGuard no_grad;
  EXPECT_LT(rel_err(e->forward(g.at("input")), g.at("logits_eval")), 1e-4);
}
