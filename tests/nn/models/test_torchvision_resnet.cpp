// torchvision's ImageNet ResNets (resnet18/34/50/101) against torchvision 0.29
// (tests/golden/torchvision_resnet_golden.safetensors, written by
// tests/golden/make_golden_torchvision_resnet.py: both sides fill every tensor from the same
// formula, so the fixture holds no weights). Checked for resnet18 and resnet50: the state_dict's
// names and shapes and the parameter count at 1000 classes, the training-mode logits, the
// cross-entropy loss, every parameter's gradient norm and two full gradients, and the eval-mode
// logits; for all four, the blocks' structure (stride on the 3x3) and zero_init_residual. Also:
// files of the CIFAR variant written when it was called "resnet18" load as cifar_resnet18, and
// a torchvision ResNet file without hpcnet's metadata is evaluated as torchvision does.
// Tolerances as the U-Net golden's (float32 through up to 53 convolutions and batch norms).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/train.h"
#include "src/nn/models/models.h"
#include "test_util.h"

using namespace hpcnet;

namespace {

const SafetensorsFile& golden() {
  static SafetensorsFile f = load_safetensors(
      std::string(HPCNET_SOURCE_DIR) + "/tests/golden/torchvision_resnet_golden.safetensors");
  return f;
}

using test_util::rel_err;

// The fixture's weights (make_golden_torchvision_resnet.py's formula()): for a tensor NAME with n
// elements, k = sum((j + 1) * byte_j of NAME) mod 9973, v_i = sin(0.7 i + 0.001 i^2 + 1.3 k + 0.5)
// in float64; weights of 2 or more dimensions v * sqrt(3 / fan_in), BatchNorm weights 1 + 0.2 v,
// biases 0.1 v, running_mean 0.1 v, running_var 1 + 0.5 |v|, num_batches_tracked 0.
void fill(const std::string& name, Tensor t) {
  int64_t key = 0;
  for (size_t j = 0; j < name.size(); ++j)
    key += static_cast<int64_t>(j + 1) * static_cast<unsigned char>(name[j]);
  key %= 9973;
  auto ends = [&](const std::string& e) {
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (ends("num_batches_tracked")) {
    t.data<int64_t>()[0] = 0;
    return;
  }
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double d = static_cast<double>(i);
    const double v = std::sin(0.7 * d + 0.001 * (d * d) + 1.3 * static_cast<double>(key) + 0.5);
    double out;
    if (ends("running_mean"))
      out = 0.1 * v;
    else if (ends("running_var"))
      out = 1 + 0.5 * std::abs(v);
    else if (ends("weight") && t.dim() >= 2)
      out = v * std::sqrt(3.0 / static_cast<double>(t.numel() / t.size(0)));
    else if (ends("weight"))
      out = 1 + 0.2 * v;
    else
      out = 0.1 * v;
    p[i] = static_cast<float>(out);
  }
}

std::shared_ptr<nn::Module> formula_resnet(const std::string& name) {
  auto m = nn::make_model(name, nn::ModelOptions{10});
  for (auto& [n, t] : m->state_dict()) fill(n, t);
  return m;
}

double grad_norm(const Tensor& g) {
  double s = 0;
  for (double v : g.to_vector_f64()) s += v * v;
  return std::sqrt(s);
}

}  // namespace

TEST(TorchvisionResNet, StateDictNamesShapesAndCountsAreTorchvisions) {
  for (const std::string name : {"resnet18", "resnet50"}) {
    auto m = nn::make_model(name, nn::ModelOptions{1000});
    const auto ref = nlohmann::json::parse(golden().metadata.at("state_dict." + name));
    // Names and shapes; hpcnet lists parameters before buffers, torchvision module by module
    // (load_state_dict on either side goes by name).
    std::map<std::string, Shape> ours, theirs;
    for (auto& [n, t] : m->state_dict()) ours[n] = t.shape();
    for (const auto& e : ref) theirs[e[0].get<std::string>()] = e[1].get<Shape>();
    EXPECT_EQ(ours.size(), ref.size()) << name;
    EXPECT_EQ(ours, theirs) << name;
    EXPECT_EQ(m->num_parameters(), std::stoll(golden().metadata.at("parameters." + name)));
  }
  EXPECT_EQ(nn::make_model("resnet18", nn::ModelOptions{1000})->num_parameters(), 11689512);
  EXPECT_EQ(nn::make_model("resnet50", nn::ModelOptions{1000})->num_parameters(), 25557032);
  // torchvision's resnet34 and resnet101 (1000 classes).
  EXPECT_EQ(nn::make_model("resnet34", nn::ModelOptions{1000})->num_parameters(), 21797672);
  EXPECT_EQ(nn::make_model("resnet101", nn::ModelOptions{1000})->num_parameters(), 44549160);
  // The CIFAR variant keeps its own name, size and default input.
  EXPECT_EQ(nn::make_model("cifar_resnet18")->num_parameters(), 11173962);
  EXPECT_EQ(nn::model_info("cifar_resnet18").imgsz, 32);
  for (const char* n : {"resnet18", "resnet34", "resnet50", "resnet101"}) {
    EXPECT_EQ(nn::model_info(n).imgsz, 224) << n;
    EXPECT_EQ(nn::model_info(n).task, "classify") << n;
  }
}

TEST(TorchvisionResNet, StrideOnTheThreeByThreeAndOutputShapes) {
  auto m50 = nn::make_model("resnet50", nn::ModelOptions{7});
  for (auto& [n, t] : m50->named_parameters()) {
    // v1.5: the 1x1 convolutions of layer2.0 run at stride 1, so conv1 keeps in_channels 256.
    if (n == "layer2.0.conv1.weight") EXPECT_EQ(t.shape(), (Shape{128, 256, 1, 1}));
    if (n == "layer2.0.downsample.0.weight") EXPECT_EQ(t.shape(), (Shape{512, 256, 1, 1}));
  }
  auto* r = dynamic_cast<nn::TorchvisionResNet*>(m50.get());
  ASSERT_NE(r, nullptr);
  NoGradGuard no_grad;
  m50->eval();
  // Any size >= 32 works: 32 px ends at 1 x 1 after layer4; 40 px at 2 x 2 (ceil of the strides).
  EXPECT_EQ(m50->forward(Tensor::zeros({1, 3, 32, 32})).shape(), (Shape{1, 7}));
  auto m18 = nn::make_model("resnet18", nn::ModelOptions{5});
  m18->eval();
  EXPECT_EQ(m18->forward(Tensor::zeros({2, 3, 40, 40})).shape(), (Shape{2, 5}));
}

TEST(TorchvisionResNet, InitialisationAsTorchvisionsAndZeroInitResidual) {
  for (const char* name : {"resnet18", "resnet50"}) {
    const bool bottleneck = std::string(name) == "resnet50";
    const std::string last_bn = bottleneck ? ".bn3.weight" : ".bn2.weight";
    for (bool zero : {false, true}) {
      nn::ModelOptions o{10};
      o.zero_init_residual = zero;
      auto m = nn::make_model(name, o);
      int zeroed = 0;
      for (auto& [n, t] : m->named_parameters()) {
        const auto v = t.to_vector_f64();
        const bool is_last_bn =
            n.size() > last_bn.size() && n.rfind("layer", 0) == 0 &&
            n.compare(n.size() - last_bn.size(), last_bn.size(), last_bn) == 0;
        if (t.dim() == 4) {
          // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std sqrt(2 / fan_out).
          const double fan_out = static_cast<double>(t.numel() / t.size(1));
          double s = 0;
          for (double x : v) s += x * x;
          const double sd = std::sqrt(s / static_cast<double>(v.size()));
          if (v.size() >= 4096) EXPECT_NEAR(sd, std::sqrt(2.0 / fan_out), 0.1 * sd) << n;
        } else if (n.find("bn") != std::string::npos || n.find("downsample.1") != std::string::npos) {
          const bool weight = n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
          const double want = weight && !(zero && is_last_bn) ? 1.0 : 0.0;
          for (double x : v) ASSERT_EQ(x, want) << n;
          zeroed += zero && is_last_bn;
        } else if (n == "fc.weight" || n == "fc.bias") {
          // nn.Linear's default: uniform within 1 / sqrt(in_features).
          const double bound = 1.0 / std::sqrt(bottleneck ? 2048.0 : 512.0);
          for (double x : v) ASSERT_LE(std::abs(x), bound) << n;
        }
      }
      EXPECT_EQ(zeroed, zero ? (bottleneck ? 16 : 8) : 0) << name;
    }
  }
}

// The references are torch's float64 results for the same float32 weights and input; hpcnet
// (float32) is held to the U-Net golden's tolerances (logits 1e-4 of the largest, loss 1e-5
// relative, each gradient norm 2e-3 relative, full gradients 1e-3 of their largest element) or to
// 4 times torch's own float32 error where that is larger (the fixture records it: ResNet-50's
// training-mode logits 7.5e-5, gradient norms up to 8.6e-4, conv1's full gradient 2.7e-3).
TEST(TorchvisionResNet, TrainForwardLossGradientsAndEvalMatchTorchvision) {
  const SafetensorsFile& g = golden();
  for (const std::string name : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(name);
    auto f32_err = [&](const std::string& what) { return g.at(name + ".f32_err." + what).item(); };
    auto m = formula_resnet(name);
    m->train();
    Tensor logits = m->forward(g.at("input"));
    EXPECT_LT(rel_err(logits, g.at(name + ".logits_train")),
              std::max(1e-4, 4 * f32_err("logits_train")));
    Tensor loss = F::cross_entropy(logits, g.at("target"));
    const double want_loss = g.at(name + ".loss").item();
    EXPECT_NEAR(loss.item(), want_loss, std::max(1e-5 * std::abs(want_loss), 4 * f32_err("loss")));
    loss.backward();
    int norms = 0;
    for (auto& [pname, p] : m->named_parameters()) {
      const double want = g.at(name + ".grad_norm." + pname).item();
      const double torch32 = g.at(name + ".grad_norm_f32." + pname).item();
      EXPECT_NEAR(grad_norm(p.grad()), want,
                  std::max(2e-3 * want, 4 * std::abs(torch32 - want)) + 1e-7)
          << pname;
      ++norms;
      if (pname == "fc.weight" || pname == "conv1.weight")
        EXPECT_LT(rel_err(p.grad(), g.at(name + ".grad." + pname)),
                  std::max(1e-3, 4 * f32_err("grad." + pname)))
            << pname;
    }
    EXPECT_EQ(norms, name == "resnet18" ? 62 : 161);
    // Eval mode with the formula's running statistics.
    auto e = formula_resnet(name);
    e->eval();
    NoGradGuard no_grad;
    EXPECT_LT(rel_err(e->forward(g.at("input")), g.at(name + ".logits_eval")),
              std::max(1e-4, 4 * f32_err("logits_eval")));
  }
}

// A model file written when the CIFAR ResNet-18 was called "resnet18" loads as cifar_resnet18
// with its weights, saying so once on stderr; a torchvision resnet18 file under that name stays
// resnet18, without a word.
TEST(TorchvisionResNet, OldCifarResNet18FilesLoadUnderTheNewName) {
  test_util::TempDir dir("tvresnet");
  manual_seed(1);
  auto cifar = nn::make_model("cifar_resnet18", nn::ModelOptions{10});
  train::ModelMeta meta;
  meta.model = "resnet18";  // as written before the rename
  meta.classes = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  const std::string old_file = (dir.path() / "old.safetensors").string();
  train::save_model(old_file, *cifar, meta);
  auto tv = nn::make_model("resnet18", nn::ModelOptions{10});
  const std::string new_file = (dir.path() / "new.safetensors").string();
  train::save_model(new_file, *tv, meta);

  testing::internal::CaptureStderr();
  train::LoadedModel a = train::load_model(old_file);
  train::LoadedModel b = train::load_model(old_file);
  train::LoadedModel c = train::load_model(new_file);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(a.name, "cifar_resnet18");
  EXPECT_EQ(b.name, "cifar_resnet18");
  EXPECT_EQ(c.name, "resnet18");
  EXPECT_EQ(test_util::count_of(err, "\n"), 1u) << err;
  EXPECT_NE(err.find("old.safetensors: model 'resnet18' (the CIFAR variant) is now called "
                     "'cifar_resnet18'"),
            std::string::npos)
      << err;
  auto want = cifar->state_dict();
  auto got = a.module->state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.to_vector_f64(), want[i].second.to_vector_f64()) << got[i].first;
  }
  EXPECT_EQ(a.classes, meta.classes);
  EXPECT_EQ(a.imgsz, 32);
}

// A torchvision ResNet saved with safetensors.torch.save_file (no hpcnet metadata), named with
// --model: its class names are 0..K-1 (K from fc) and its evaluation transform torchvision's
// (Resize(256) + CenterCrop(224) + ImageNet's mean and std: eval_policy "imagenet") at 224 px.
// Other models' files without metadata keep hpcnet's defaults (CIFAR-10's names, no policy).
TEST(TorchvisionResNet, FilesWithoutMetadataAreEvaluatedAsTorchvisionDoes) {
  test_util::TempDir dir("tvresnet");
  auto tv = nn::make_model("resnet18", nn::ModelOptions{7});
  const std::string file = (dir.path() / "plain.safetensors").string();
  save_safetensors(file, tv->state_dict());
  train::LoadedModel m = train::load_model(file, "resnet18");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6"}));
  EXPECT_FALSE(m.classes_recorded);
  EXPECT_EQ(m.eval_policy, "imagenet");
  EXPECT_EQ(m.imgsz, 224);
  auto cifar = nn::make_model("cifar_resnet18", nn::ModelOptions{10});
  save_safetensors(file, cifar->state_dict());
  train::LoadedModel c = train::load_model(file, "cifar_resnet18");
  EXPECT_EQ(c.eval_policy, "");
  EXPECT_EQ(c.classes.size(), 10u);
  EXPECT_EQ(c.classes[0], "airplane");
}
