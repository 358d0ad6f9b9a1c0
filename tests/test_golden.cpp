// hpcnet against PyTorch's numbers (tests/golden/, written by make_golden.py; see its README for
// what each entry is and why these tolerances):
//   float64 ops: |a - b| <= 1e-10 (1 + |b|)
//   lenet float32: logits and loss 1e-5, gradients 1e-6, parameters after 10 SGD steps 2e-6,
//   step losses 1e-5 (all absolute).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"

using namespace hpcnet;

namespace {

const std::string kGoldenDir = std::string(HPCNET_SOURCE_DIR) + "/tests/golden/";

void expect_near_all(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol,
                     const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_vector_f64(), b = want.to_vector_f64();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = abs_tol + rel_tol * std::abs(b[i]);
    worst = std::max(worst, std::abs(a[i] - b[i]));
    ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
  }
}

const SafetensorsFile& ops_golden() {
  static SafetensorsFile f = load_safetensors(kGoldenDir + "ops_golden.safetensors");
  return f;
}
const SafetensorsFile& lenet_golden() {
  static SafetensorsFile f = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
  return f;
}

// Runs op on the fixture's inputs, backprops the fixture's dy, and compares y and every d<input>.
void check_op(const std::string& prefix, const std::vector<std::string>& input_names,
              const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  const auto& g = ops_golden();
  std::vector<Tensor> in;
  for (auto& n : input_names) {
    Tensor t = g.at(prefix + "." + n).clone();
    if (t.dtype() == DType::kFloat64) t.set_requires_grad(true);
    in.push_back(t);
  }
  Tensor y = op(in);
  expect_near_all(y, g.at(prefix + ".y"), 1e-10, 1e-10, prefix + ".y");
  y.backward(g.at(prefix + ".dy"));
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype() != DType::kFloat64) continue;
    expect_near_all(in[i].grad(), g.at(prefix + ".d" + input_names[i]), 1e-10, 1e-10,
                    prefix + ".d" + input_names[i]);
  }
}

}  // namespace

TEST(Golden, OpsMatchPyTorchInFloat64) {
  check_op("conv2d_s1p1", {"x", "w", "b"}, [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); });
  check_op("conv2d_s2p0", {"x", "w", "b"}, [](auto& v) { return F::conv2d(v[0], v[1], v[2], 2, 0); });
  check_op("max_pool2d_k2s2", {"x"}, [](auto& v) { return F::max_pool2d(v[0], 2, 2); });
  check_op("max_pool2d_k3s2p1", {"x"}, [](auto& v) { return F::max_pool2d(v[0], 3, 2, 1); });
  check_op("linear", {"x", "w", "b"}, [](auto& v) { return F::linear(v[0], v[1], v[2]); });
  check_op("relu", {"x"}, [](auto& v) { return F::relu(v[0]); });
  check_op("log_softmax", {"x"}, [](auto& v) { return F::log_softmax(v[0]); });
  check_op("nll_loss", {"x", "target"}, [](auto& v) { return F::nll_loss(v[0], v[1]); });
  check_op("cross_entropy", {"x", "target"}, [](auto& v) { return F::cross_entropy(v[0], v[1]); });
  check_op("cross_entropy_ls01", {"x", "target"},
           [](auto& v) { return F::cross_entropy(v[0], v[1], 0.1); });
  check_op("sum", {"x"}, [](auto& v) { return F::sum(v[0]); });
  check_op("mean", {"x"}, [](auto& v) { return F::mean(v[0]); });
  check_op("flatten", {"x"}, [](auto& v) { return F::flatten(v[0], 1); });
}

namespace {
std::shared_ptr<nn::Module> lenet_from_init() {
  const auto& g = lenet_golden();
  auto model = nn::make_model("lenet");
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : model->named_parameters()) state[name] = g.at("init." + name);
  model->load_state_dict(state);
  return model;
}
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
      Tensor y = Tensor::from_labels({labels.data<int64_t>()[2 * s], labels.data<int64_t>()[2 * s + 1]});
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
