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

// make_golden_unet.py's weight_values(): the value of every tensor, from its name.
void fill_from_formula(const std::string& name, Tensor t) {
  int64_t key = 0;
  for (size_t j = 0; j < name.size(); ++j)
    key += static_cast<int64_t>(j + 1) * static_cast<unsigned char>(name[j]);
  key %= 9973;
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("num_batches_tracked")) {
    t.data<int64_t>()[0] = 0;
    return;
  }
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(key) + 0.5);
    double out;
    if (ends("running_mean"))
      out = 0.1 * v;
    else if (ends("running_var"))
      out = 1 + 0.5 * std::abs(v);
    else if (ends("weight") && t.dim() == 4)
      out = v * std::sqrt(3.0 / static_cast<double>(t.size(1) * t.size(2) * t.size(3)));
    else if (ends("weight"))
      out = 1 + 0.2 * v;
    else
      out = 0.1 * v;
    p[i] = static_cast<float>(out);
  }
}

std::shared_ptr<nn::Module> formula_unet() {
  auto m = nn::make_model("unet_resnet18", nn::ModelOptions{11});
  for (auto& [name, t] : m->state_dict()) fill_from_formula(name, t);
  return m;
}

// max |a - b| / max |b|.
double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto x = a.to_vector_f64(), y = b.to_vector_f64();
  double d = 0, m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    d = std::max(d, std::abs(x[i] - y[i]));
    m = std::max(m, std::abs(y[i]));
  }
  return m > 0 ? d / m : d;
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
  // Gradients: each parameter's norm to 1e-3 relative, the full gradients to 1e-3 of their
  // largest element.
  int norms = 0;
  for (auto& [name, p] : m->named_parameters()) {
    const double want = g.at("grad_norm." + name).item();
    double got = 0;
    for (double v : p.grad().to_vector_f64()) got += v * v;
    got = std::sqrt(got);
    EXPECT_NEAR(got, want, 1e-3 * want + 1e-7) << name;
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
