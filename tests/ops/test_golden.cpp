// hpcnet against PyTorch's numbers (tests/golden/, written by make_golden.py; see its README for
// what each entry is and why these tolerances):
//   float64 ops: |a - b| <= 1e-10 (1 + |b|)
//   lenet float32: logits and loss 1e-5, gradients 1e-6, parameters after 10 SGD steps 2e-6,
//   step losses 1e-5 (all absolute).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "src/ops/backend/cpu/cpu_ops.h"
#include "tests/ops/op_tests.h"
#include "test_util.h"

using namespace hpcnet;
using hpcnet::test_util::max_abs;

namespace {

const std::string kGoldenDir = std::string(HPCNET_SOURCE_DIR) + "/tests/golden/";

// Also returns the largest |got - want| in *worst when given.
void expect_near_all(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol,
                     const std::string& what, double* worst_out = nullptr) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_vector_f64(), b = want.to_vector_f64();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = abs_tol + rel_tol * std::abs(b[i]);
    worst = std::max(worst, std::abs(a[i] - b[i]));
    ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
  }
  if (worst_out) *worst_out = std::max(*worst_out, worst);
}

const SafetensorsFile& ops_golden() {
  static SafetensorsFile f = load_safetensors(kGoldenDir + "ops_golden.safetensors");
  return f;
}
const SafetensorsFile& lenet_golden() {
  static SafetensorsFile f = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
  return f;
}

// Runs op on fixture g's inputs <prefix>.<name> (float64 ones get gradients), backprops g's
// <prefix>.dy, and compares y with <prefix>.y and every float64 input's gradient with
// <prefix>.d<name>, to 1e-10 (1 + |want|). Returns the largest absolute difference seen.
double check_op(const SafetensorsFile& g, const std::string& prefix,
                const std::vector<std::string>& input_names,
                const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  std::vector<Tensor> in;
  for (auto& n : input_names) {
    Tensor t = g.at(prefix + "." + n).clone();
    if (t.dtype() == DType::kFloat64) t.set_requires_grad(true);
    in.push_back(t);
  }
  double worst = 0;
  Tensor y = op(in);
  expect_near_all(y, g.at(prefix + ".y"), 1e-10, 1e-10, prefix + ".y", &worst);
  y.backward(g.at(prefix + ".dy"));
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype() != DType::kFloat64) continue;
    expect_near_all(in[i].grad(), g.at(prefix + ".d" + input_names[i]), 1e-10, 1e-10,
                    prefix + ".d" + input_names[i], &worst);
  }
  return worst;
}

// Model `name` with every state_dict entry from g's init.<entry>.
std::shared_ptr<nn::Module> model_from_init(const SafetensorsFile& g, const std::string& name) {
  auto model = nn::make_model(name);
  std::map<std::string, Tensor> state;
  for (auto& [entry, t] : model->state_dict()) state[entry] = g.at("init." + entry);
  model->load_state_dict(state);
  return model;
}


// PyTorch's numbers for single ops in float64, one test per op: Ops/<op>.PyTorchGoldenFloat64
// (the fixture's <prefix>.* entries; tolerance 1e-10 (1 + |want|)).
struct GoldenCase {
  const char* op;
  const char* prefix;
  std::vector<std::string> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

std::vector<GoldenCase> golden_cases() {
  return {
      {"conv2d",
       "conv2d_s1p1",
       {"x", "w", "b"},
       [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); }},
      {"conv2d",
       "conv2d_s2p0",
       {"x", "w", "b"},
       [](auto& v) { return F::conv2d(v[0], v[1], v[2], 2, 0); }},
      {"max_pool2d", "max_pool2d_k2s2", {"x"}, [](auto& v) { return F::max_pool2d(v[0], 2, 2); }},
      {"max_pool2d",
       "max_pool2d_k3s2p1",
       {"x"},
       [](auto& v) { return F::max_pool2d(v[0], 3, 2, 1); }},
      {"linear", "linear", {"x", "w", "b"}, [](auto& v) { return F::linear(v[0], v[1], v[2]); }},
      {"relu", "relu", {"x"}, [](auto& v) { return F::relu(v[0]); }},
      {"log_softmax", "log_softmax", {"x"}, [](auto& v) { return F::log_softmax(v[0]); }},
      {"nll_loss", "nll_loss", {"x", "target"}, [](auto& v) { return F::nll_loss(v[0], v[1]); }},
      {"cross_entropy",
       "cross_entropy",
       {"x", "target"},
       [](auto& v) { return F::cross_entropy(v[0], v[1]); }},
      {"cross_entropy",
       "cross_entropy_ls01",
       {"x", "target"},
       [](auto& v) { return F::cross_entropy(v[0], v[1], 0.1); }},
      {"sum", "sum", {"x"}, [](auto& v) { return F::sum(v[0]); }},
      {"mean", "mean", {"x"}, [](auto& v) { return F::mean(v[0]); }},
      {"reshape", "flatten", {"x"}, [](auto& v) { return F::flatten(v[0], 1); }},
      {"gelu", "gelu", {"x"}, [](auto& v) { return F::gelu(v[0]); }},
      {"gelu", "gelu_tanh", {"x"}, [](auto& v) { return F::gelu(v[0], "tanh"); }},
      {"softmax", "softmax_last", {"x"}, [](auto& v) { return F::softmax(v[0], -1); }},
      {"softmax", "softmax_dim1", {"x"}, [](auto& v) { return F::softmax(v[0], 1); }},
      {"bmm", "bmm", {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1]); }},
      {"bmm", "bmm_ta", {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1], true, false); }},
      {"bmm", "bmm_tb", {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1], false, true); }},
      {"depthwise_conv2d",
       "depthwise_conv2d",
       {"x", "w", "b"},
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); }},
      {"depthwise_conv2d",
       "depthwise_conv2d_s2d2",
       {"x", "w"},
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 2, 2); }},
  };
}

const bool kGoldensRegistered = [] {
  std::set<std::string> ops;
  for (const GoldenCase& c : golden_cases()) ops.insert(c.op);
  for (const std::string& op : ops)
    test_util::register_op_check(
        op, "PyTorchGoldenFloat64",
        [op] {
          for (const GoldenCase& c : golden_cases())
            if (c.op == op)
              std::printf("[ golden   ] %-28s max |hpcnet - torch| = %.3g\n", c.prefix,
                          check_op(ops_golden(), c.prefix, c.inputs, c.fn));
        },
        __FILE__, __LINE__);
  return true;
}();

}  // namespace

// The segmentation ops (upsample, cat, per-pixel cross entropy with weights and ignore_index);
// prints the largest difference from PyTorch of each case.
TEST(Golden, SegmentationOpsMatchPyTorchInFloat64) {
  const auto& g = ops_golden();
  auto report = [](const std::string& name, double worst) {
    std::printf("[ golden   ] %-28s max |hpcnet - torch| = %.3g\n", name.c_str(), worst);
  };
  report("upsample_nearest2d_s2", check_op(g, "upsample_nearest2d_s2", {"x"},
                                           [](auto& v) { return F::upsample_nearest2d(v[0], 2); }));
  report("upsample_nearest2d_s3", check_op(g, "upsample_nearest2d_s3", {"x"},
                                           [](auto& v) { return F::upsample_nearest2d(v[0], 3); }));
  report("cat_dim1", check_op(g, "cat_dim1", {"a", "b", "c"}, [](auto& v) {
           return F::cat({v[0], v[1], v[2]}, 1);
         }));
  report("cat_dim_last", check_op(g, "cat_dim_last", {"a", "b"}, [](auto& v) {
           return F::cat({v[0], v[1]}, -1);
         }));
  report("cross_entropy2d", check_op(g, "cross_entropy2d", {"x", "target"},
                                     [](auto& v) { return F::cross_entropy2d(v[0], v[1]); }));
  const Tensor weight = g.at("cross_entropy2d_weighted.weight");
  report("cross_entropy2d_weighted",
         check_op(g, "cross_entropy2d_weighted", {"x", "target"},
                  [&](auto& v) { return F::cross_entropy2d(v[0], v[1], weight, 255); }));
  // Every pixel ignored: torch's NaN, and a zero gradient.
  Tensor x = g.at("cross_entropy2d_all_ignored.x").clone();
  x.set_requires_grad(true);
  Tensor y = F::cross_entropy2d(x, g.at("cross_entropy2d_all_ignored.target"));
  EXPECT_TRUE(std::isnan(g.at("cross_entropy2d_all_ignored.y").item()));
  EXPECT_TRUE(std::isnan(y.item()));
  y.backward(g.at("cross_entropy2d_all_ignored.dy"));
  expect_near_all(x.grad(), g.at("cross_entropy2d_all_ignored.dx"), 0, 0,
                  "cross_entropy2d_all_ignored.dx");
}

// DeepLab's and the decoders' ops: dilated and transposed convolution, bilinear resampling both
// ways, and segmentation_models_pytorch's multiclass Dice loss.
TEST(Golden, DeepLabAndDecoderOpsMatchPyTorchInFloat64) {
  const auto& g = ops_golden();
  auto report = [](const std::string& name, double worst) {
    std::printf("[ golden   ] %-28s max |hpcnet - torch| = %.3g\n", name.c_str(), worst);
  };
  report("conv2d_dilated", check_op(g, "conv2d_dilated", {"x", "w", "b"},
                                    [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 2, 2); }));
  report("conv_transpose2d", check_op(g, "conv_transpose2d", {"x", "w", "b"}, [](auto& v) {
           return F::conv_transpose2d(v[0], v[1], v[2], 2, 1, 1);
         }));
  report("upsample_bilinear2d", check_op(g, "upsample_bilinear2d", {"x"}, [](auto& v) {
           return F::upsample_bilinear2d(v[0], 9, 7, false);
         }));
  report("upsample_bilinear2d_ac", check_op(g, "upsample_bilinear2d_ac", {"x"}, [](auto& v) {
           return F::upsample_bilinear2d(v[0], 9, 7, true);
         }));
  report("upsample_bilinear2d_down", check_op(g, "upsample_bilinear2d_down", {"x"}, [](auto& v) {
           return F::upsample_bilinear2d(v[0], 3, 4, false);
         }));
  report("dice_loss", check_op(g, "dice_loss", {"x", "target"},
                               [](auto& v) { return F::dice_loss(v[0], v[1]); }));
  const Tensor weight = g.at("dice_loss_weighted.weight");
  report("dice_loss_weighted", check_op(g, "dice_loss_weighted", {"x", "target"}, [&](auto& v) {
           return F::dice_loss(v[0], v[1], weight, 255, 1.0);
         }));
}

namespace {
std::shared_ptr<nn::Module> lenet_from_init() { return model_from_init(lenet_golden(), "lenet"); }
}  // namespace

TEST(Golden, LenetForwardAndBackwardMatchPyTorch) {
  const auto& g = lenet_golden();
  auto model = lenet_from_init();
  Tensor logits = model->forward(g.at("inputs"));
  expect_near_all(logits, g.at("logits"), 1e-5, 0, "logits");
  Tensor loss = F::cross_entropy(logits, g.at("labels"));
  EXPECT_NEAR(loss.item(), g.at("loss").item(), 1e-5);
  loss.backward();
  for (auto& [name, p] : model->named_parameters())
    expect_near_all(p.grad(), g.at("grad." + name), 1e-6, 0, "grad." + name);
}

TEST(Golden, LenetTenSgdStepsMatchPyTorch) {
  const auto& g = lenet_golden();
  Tensor inputs = g.at("step_inputs").to(DType::kFloat32);  // stored as float16 (exact)
  Tensor labels = g.at("step_labels");
  struct Run {
    std::string name;
    optim::SGDOptions opt;
  };
  std::vector<Run> runs = {{"sgd", {0.01, 0.9, 0, 0, false}},
                           {"sgd_wd", {0.01, 0.9, 0.1, 5e-4, false}},
                           {"sgd_nesterov", {0.01, 0.9, 0, 1e-3, true}}};
  for (auto& run : runs) {
    auto model = lenet_from_init();
    optim::SGD opt(model->named_parameters(), run.opt);
    std::vector<double> want_losses = g.at(run.name + "_losses").to_vector_f64();
    for (int64_t s = 0; s < 10; ++s) {
      Tensor x = Tensor::empty({2, 3, 32, 32});
      std::memcpy(x.data<float>(), inputs.data<float>() + s * 2 * 3 * 32 * 32, x.nbytes());
      Tensor y =
          Tensor::from_labels({labels.data<int64_t>()[2 * s], labels.data<int64_t>()[2 * s + 1]});
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model->forward(x), y);
      EXPECT_NEAR(loss.item(), want_losses[s], 1e-5) << run.name << " step " << s;
      loss.backward();
      opt.step();
    }
    for (auto& [name, p] : model->named_parameters())
      expect_near_all(p, g.at(run.name + "." + name), 2e-6, 0, run.name + "." + name);
  }
}

// ---- ResNets (tests/golden/resnet_golden.safetensors, written by make_golden_resnet.py) ----
// float64 ops: 1e-10 as above. resnet20 in float32: every tensor within 5e-5 of its largest
// magnitude (the fixture's float32 entries agree with a float64 rerun to 2.5e-6 of that; another
// summation order, e.g. oneDNN's blocked convolutions, moves results by a few times that).

namespace {
const SafetensorsFile& resnet_golden() {
  static SafetensorsFile f = load_safetensors(kGoldenDir + "resnet_golden.safetensors");
  return f;
}

void expect_close_to_scale(const Tensor& got, const Tensor& want, double rel,
                           const std::string& what) {
  expect_near_all(got, want, rel * std::max(max_abs(want), 1e-30), 0, what);
}

std::shared_ptr<nn::Module> resnet20_from_init() {
  return model_from_init(resnet_golden(), "resnet20");
}
}  // namespace

TEST(GoldenResNet, OpsMatchPyTorchInFloat64) {
  const auto& g = resnet_golden();
  for (bool training : {true, false}) {
    std::string pre = training ? "bn_train" : "bn_eval";
    Tensor rm = g.at(pre + ".running_mean_in").clone(), rv = g.at(pre + ".running_var_in").clone();
    check_op(g, pre, {"x", "weight", "bias"},
             [&](auto& v) { return F::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5); });
    expect_near_all(rm, g.at(pre + ".running_mean_out"), 1e-10, 1e-10, pre + ".running_mean");
    expect_near_all(rv, g.at(pre + ".running_var_out"), 1e-10, 1e-10, pre + ".running_var");
  }
  check_op(g, "gap", {"x"}, [](auto& v) { return F::global_avg_pool2d(v[0]); });
  check_op(g, "shortcut_a", {"x"}, [](auto& v) { return F::subsample_pad(v[0], 2, 2); });
  check_op(g, "shortcut_a_odd", {"x"}, [](auto& v) { return F::subsample_pad(v[0], 2, 2); });
}

namespace {
// Blocked activations on or off for one scope (the default is on).
struct BlockedLayouts {
  explicit BlockedLayouts(bool on) { cpu::set_blocked_layouts(on); }
  ~BlockedLayouts() { cpu::set_blocked_layouts(true); }
};

void check_resnet20_forward_backward(double grad_tol) {
  const auto& g = resnet_golden();
  auto model = resnet20_from_init();
  model->train();
  Tensor logits = model->forward(g.at("inputs"));
  expect_close_to_scale(logits, g.at("logits"), 5e-5, "logits");
  Tensor loss = F::cross_entropy(logits, g.at("labels"));
  EXPECT_NEAR(loss.item(), g.at("loss").item(), 5e-5 * std::abs(g.at("loss").item()));
  loss.backward();
  int checked = 0;
  for (auto& [name, p] : model->named_parameters()) {
    if (g.contains("grad." + name)) {
      expect_close_to_scale(p.grad(), g.at("grad." + name), grad_tol, "grad." + name);
      ++checked;
    } else {  // stored as its norm only (fixture size)
      double n2 = 0;
      for (double v : p.grad().to_vector_f64()) n2 += v * v;
      double want = g.at("grad_norm." + name).item();
      EXPECT_NEAR(std::sqrt(n2), want, grad_tol * want) << "grad_norm." << name;
    }
  }
  EXPECT_GE(checked, 50);
  for (auto& [name, b] : model->named_buffers())
    expect_close_to_scale(b, g.at("after." + name), 5e-5, "after." + name);
  model->eval();
  NoGradGuard ng;
  expect_close_to_scale(model->forward(g.at("inputs")), g.at("eval_logits"), 5e-5, "eval_logits");
}

// One step of opt per batch s of g's step_inputs (stored as float16) and step_labels: zero_grad,
// forward, cross-entropy, backward, step. Each loss is within 1e-4 (relative) of g's <losses>[s].
void train_on_step_batches(const SafetensorsFile& g, nn::Module& model, optim::Optimizer& opt,
                           const std::string& losses) {
  Tensor inputs = g.at("step_inputs").to(DType::kFloat32);
  Tensor labels = g.at("step_labels");
  std::vector<double> want_losses = g.at(losses).to_vector_f64();
  const int64_t b = inputs.size(1), per = inputs.numel() / inputs.size(0);
  for (int64_t s = 0; s < inputs.size(0); ++s) {
    Tensor x = Tensor::empty({b, 3, 32, 32});
    std::memcpy(x.data<float>(), inputs.data<float>() + s * per, x.nbytes());
    std::vector<int64_t> l(labels.data<int64_t>() + s * b, labels.data<int64_t>() + (s + 1) * b);
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model.forward(x), Tensor::from_labels(l));
    EXPECT_NEAR(loss.item(), want_losses[s], 1e-4 * std::abs(want_losses[s])) << "step " << s;
    loss.backward();
    opt.step();
  }
}
}  // namespace

// Row-major activations (the plain batch-norm kernels) match PyTorch to 5e-5 of each tensor's
// scale everywhere.
TEST(GoldenResNet, Resnet20ForwardBackwardAndRunningStatsMatchPyTorch) {
  BlockedLayouts off(false);
  check_resnet20_forward_backward(5e-5);
}

// Blocked activations (the default; other summation order in batch norm): forward, running stats
// and eval logits to 5e-5 as above. Gradients to 5e-3 of scale: in this fixture one ReLU input of
// layer1 lies within float32 rounding of zero, and the blocked kernels round it to the other
// side (44,919 vs 44,920 positive outputs of 65,536, measured), which moves stage-1 gradients by
// one element's worth (~2e-3 of scale). tests/ops/test_layout.cpp holds the blocked kernels to float64
// at 2e-5 on inputs without such ties.
TEST(GoldenResNet, Resnet20BlockedLayoutMatchesPyTorch) {
  BlockedLayouts on(true);
  check_resnet20_forward_backward(5e-3);
}

TEST(GoldenResNet, Resnet20ThreeNesterovSgdStepsMatchPyTorch) {
  const auto& g = resnet_golden();
  auto model = resnet20_from_init();
  optim::SGD opt(model->named_parameters(), {0.1, 0.9, 0, 5e-4, true});
  train_on_step_batches(g, *model, opt, "sgd3_losses");
  auto state = model->state_dict();
  int checked = 0;
  for (auto& [name, t] : state)
    if (g.contains("sgd3." + name)) {
      expect_close_to_scale(t, g.at("sgd3." + name), 1e-4, "sgd3." + name);
      ++checked;
    }
  EXPECT_EQ(checked, 10);
}

TEST(GoldenResNet, Resnet20ThreeAdamWStepsMatchPyTorch) {
  const auto& g = resnet_golden();
  auto model = resnet20_from_init();
  optim::AdamW opt(model->named_parameters(), {1e-3, 0.9, 0.999, 1e-8, 5e-2});
  train_on_step_batches(g, *model, opt, "adamw3_losses");
  int checked = 0;
  for (auto& [name, p] : model->named_parameters())
    if (g.contains("adamw3." + name)) {
      expect_close_to_scale(p, g.at("adamw3." + name), 1e-4, "adamw3." + name);
      ++checked;
    }
  EXPECT_EQ(checked, 7);
}

TEST(GoldenResNet, GradientClippingMatchesPyTorch) {
  BlockedLayouts off(false);  // see Resnet20BlockedLayoutMatchesPyTorch
  const auto& g = resnet_golden();
  auto model = resnet20_from_init();
  Tensor loss = F::cross_entropy(model->forward(g.at("inputs")), g.at("labels"));
  loss.backward();
  double total = optim::clip_grad_norm(model->parameters(), 0.5);
  EXPECT_NEAR(total, g.at("clip.total_norm").item(), 5e-5 * g.at("clip.total_norm").item());
  int checked = 0;
  for (auto& [name, p] : model->named_parameters())
    if (g.contains("clip.grad." + name)) {
      expect_close_to_scale(p.grad(), g.at("clip.grad." + name), 5e-5, "clip.grad." + name);
      ++checked;
    }
  EXPECT_EQ(checked, 7);
}

TEST(GoldenResNet, ModelsHavePyTorchsNamesAndSizes) {
  const auto& g = resnet_golden();
  auto r20 = nn::make_model("resnet20");
  for (auto& [name, t] : r20->state_dict()) {
    ASSERT_TRUE(g.contains("init." + name)) << name;
    EXPECT_EQ(t.shape(), g.at("init." + name).shape()) << name;
  }
  // Parameter counts printed by `bench/pytorch_resnet.py --check` (torch 1.13).
  EXPECT_EQ(r20->num_parameters(), 269722);
  EXPECT_EQ(nn::make_model("resnet32")->num_parameters(), 464154);
  EXPECT_EQ(nn::make_model("resnet56")->num_parameters(), 853018);
  auto r18 = nn::make_model("cifar_resnet18");
  EXPECT_EQ(r18->num_parameters(), 11173962);
  EXPECT_EQ(r18->named_parameters().size(), 62u);
  EXPECT_EQ(r18->named_buffers().size(), 60u);
  bool has_projection = false;
  for (auto& [name, t] : r18->named_parameters())
    has_projection |= name == "layer2.0.shortcut.0.weight" || name == "layer2.0.shortcut.1.weight";
  EXPECT_TRUE(has_projection);
}
