// Tests of the tutorial's LeNet (src/nn/models/lenet.cpp): PyTorch's parameter names, shapes,
// order and count, num_classes, the input check, unknown model names, and initialisation within
// PyTorch's bounds, reproducible under manual_seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/nn/models/models.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- LeNet: PyTorch's names, shapes, order, count -----------------------------------------------

TEST(NnLeNet, ParameterNamesShapesAndOrderMatchPyTorch) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  // The order of the tutorial Net's named_parameters() / state_dict().
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1.weight", {6, 3, 5, 5}},  {"conv1.bias", {6}},
      {"conv2.weight", {16, 6, 5, 5}}, {"conv2.bias", {16}},
      {"fc1.weight", {120, 400}},      {"fc1.bias", {120}},
      {"fc2.weight", {84, 120}},       {"fc2.bias", {84}},
      {"fc3.weight", {10, 84}},        {"fc3.bias", {10}}};
  auto params = model->named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].first, expected[i].first) << "position " << i;
    EXPECT_EQ(params[i].second.shape(), expected[i].second) << params[i].first;
    EXPECT_EQ(params[i].second.dtype(), DType::kFloat32) << params[i].first;
    EXPECT_TRUE(params[i].second.requires_grad()) << params[i].first;
    EXPECT_TRUE(params[i].second.is_contiguous()) << params[i].first;
  }
  // The pool has no parameters and LeNet no buffers: state_dict is the parameter list.
  EXPECT_TRUE(model->named_buffers().empty());
  auto sd = model->state_dict();
  ASSERT_EQ(sd.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(sd[i].first, expected[i].first);
  EXPECT_EQ(model->num_parameters(), 62006);  // sum(p.numel() for p in net.parameters())
  EXPECT_EQ(model->parameters().size(), expected.size());
}

TEST(NnLeNet, NumClassesSetsTheLastLayer) {
  auto model = nn::make_model("lenet", 3);
  auto params = model->named_parameters();
  EXPECT_EQ(params[8].first, "fc3.weight");
  EXPECT_EQ(params[8].second.shape(), (Shape{3, 84}));
  EXPECT_EQ(params[9].second.shape(), (Shape{3}));
  EXPECT_EQ(model->num_parameters(), 62006 - 7 * 85);
  Tensor y = model->forward(uniform_images(2, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
}

TEST(NnLeNet, ForwardShapeAndInputCheck) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  Tensor y = (*model)(uniform_images(5, 2));
  EXPECT_EQ(y.shape(), (Shape{5, 10}));
  for (float v : y.to_vector()) EXPECT_TRUE(std::isfinite(v));
  std::string msg = input_error([&] { model->forward(Tensor::zeros({1, 3, 28, 28})); });
  EXPECT_NE(msg.find("(1, 3, 28, 28)"), std::string::npos) << msg;
  msg = input_error([&] { model->forward(Tensor::zeros({1, 1, 32, 32})); });
  EXPECT_NE(msg.find("lenet"), std::string::npos) << msg;
}

TEST(NnLeNet, MakeModelRejectsUnknownNames) {
  std::string msg = input_error([] { nn::make_model("resnet999"); });
  EXPECT_NE(msg.find("resnet999"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lenet"), std::string::npos) << msg;  // lists the known ones
  msg = input_error([] { nn::make_model("lenet", 0); });
  EXPECT_NE(msg.find("classes"), std::string::npos) << msg;
  auto names = nn::model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "lenet"), names.end());
}

// ---- initialisation --------------------------------------------------------------------------

// torch: kaiming_uniform_(a=sqrt(5)) for weights and uniform(+-1/sqrt(fan_in)) for biases, i.e.
// every value of a layer uniform in +-1/sqrt(fan_in).
TEST(NnLeNet, InitIsUniformWithinPyTorchBounds) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  const std::map<std::string, double> fan_in = {
      {"conv1", 3 * 25}, {"conv2", 6 * 25}, {"fc1", 400}, {"fc2", 120}, {"fc3", 84}};
  for (auto& [name, t] : model->named_parameters()) {
    std::string layer = name.substr(0, name.find('.'));
    double bound = 1.0 / std::sqrt(fan_in.at(layer));
    std::vector<float> v = t.to_vector();
    double maxabs = 0, sum = 0, sumsq = 0;
    for (float x : v) {
      maxabs = std::max(maxabs, std::fabs(static_cast<double>(x)));
      sum += x;
      sumsq += static_cast<double>(x) * x;
    }
    EXPECT_LE(maxabs, bound) << name;
    const double n = static_cast<double>(v.size());
    if (n >= 400) {
      // Uniform(-b, b): max |w| close to b, mean ~ 0, variance b^2 / 3.
      EXPECT_GT(maxabs, 0.98 * bound) << name;
      EXPECT_NEAR(sum / n, 0.0, 4 * bound / std::sqrt(3 * n)) << name;
      EXPECT_NEAR(sumsq / n / (bound * bound / 3), 1.0, 0.1) << name;
      // Each quarter of [-b, b] holds about a quarter of the values.
      std::vector<int> bins(4, 0);
      for (float x : v) bins[std::min(3, static_cast<int>((x / bound + 1) * 2))]++;
      for (int b = 0; b < 4; ++b) EXPECT_NEAR(bins[b] / n, 0.25, 0.06) << name << " bin " << b;
    } else {
      EXPECT_GT(maxabs, 0.3 * bound) << name;  // not all zero, not a tiny scale
    }
  }
}

TEST(NnLeNet, ManualSeedMakesInitReproducible) {
  manual_seed(1234);
  auto a = parameter_values(*nn::make_model("lenet"));
  manual_seed(1234);
  auto b = parameter_values(*nn::make_model("lenet"));
  EXPECT_EQ(a, b);
  manual_seed(1235);
  auto c = parameter_values(*nn::make_model("lenet"));
  EXPECT_NE(a.at("fc1.weight"), c.at("fc1.weight"));
  // Two models built one after the other differ (the generator advances).
  manual_seed(1234);
  auto first = parameter_values(*nn::make_model("lenet"));
  auto second = parameter_values(*nn::make_model("lenet"));
  EXPECT_EQ(first, a);
  EXPECT_NE(first.at("conv1.weight"), second.at("conv1.weight"));
}
