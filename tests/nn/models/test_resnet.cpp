// Tests of the resnet models (src/nn/models/resnet.cpp): He et al.'s CIFAR ResNets (20, 32, 56) and
// the CIFAR ResNet-18 forward in train and eval mode with their parameter counts, num_classes, and
// unknown model names. BatchNorm2d, dropout, AdamW/EMA, Cutout and bfloat16 convolutions have their
// own files (tests/nn/, tests/optim/, tests/data/, tests/ops/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- models ------------------------------------------------------------------------------------

TEST(ResnetModels, CifarResnetsForwardInTrainAndEvalMode) {
  // He et al.'s CIFAR ResNets with option-A shortcuts: 6n+2 layers.
  const std::vector<std::pair<std::string, int64_t>> models = {
      {"resnet20", 269722}, {"resnet32", 464154}, {"resnet56", 853018}};
  Tensor x = normal_tensor({2, 3, 32, 32}, 30);
  for (auto& [name, params] : models) {
    manual_seed(0);
    auto m = nn::make_model(name);
    EXPECT_EQ(m->num_parameters(), params) << name;
    ASSERT_TRUE(m->is_training());
    Tensor y = m->forward(x);
    ASSERT_EQ(y.shape(), (Shape{2, 10})) << name;
    for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
    // Train mode counted the batch in every batch norm.
    int bns = 0;
    for (auto& [n, t] : m->named_buffers())
      if (n.find("num_batches_tracked") != std::string::npos) {
        ++bns;
        EXPECT_EQ(t.item(), 1.0) << name << " " << n;
      }
    EXPECT_GT(bns, 0) << name;
    if (name == "resnet20") {  // backward reaches every parameter
      F::cross_entropy(y, Tensor::from_labels({3, 8})).backward();
      for (auto& [n, p] : m->named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << n;
        ASSERT_EQ(p.grad().shape(), p.shape()) << n;
        for (float g : p.grad().to_vector()) ASSERT_TRUE(std::isfinite(g)) << n;
      }
    }
    m->eval();
    const auto buffers = values_by_name(m->named_buffers());
    Tensor ye = m->forward(x);
    ASSERT_EQ(ye.shape(), (Shape{2, 10})) << name;
    for (float v : ye.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
    EXPECT_NE(ye.to_vector(), y.to_vector()) << name << ": eval must use the running statistics";
    EXPECT_EQ(values_by_name(m->named_buffers()), buffers) << name << ": eval updated the buffers";
    EXPECT_EQ(m->forward(x).to_vector(), ye.to_vector()) << name << ": eval is deterministic";
  }
}

TEST(ResnetModels, Resnet18ForwardOnCifar) {
  manual_seed(0);
  auto m = nn::make_model("cifar_resnet18");
  EXPECT_EQ(m->num_parameters(), 11173962);  // the CIFAR ResNet-18 (kuangliu/pytorch-cifar)
  Tensor y = m->forward(normal_tensor({2, 3, 32, 32}, 31));
  ASSERT_EQ(y.shape(), (Shape{2, 10}));
  for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
}

TEST(ResnetModels, NumClassesAndUnknownNames) {
  manual_seed(0);
  auto m = nn::make_model("resnet20", 7);
  auto params = m->named_parameters();
  EXPECT_EQ(params.back().second.shape(), (Shape{7}));
  EXPECT_EQ(params[params.size() - 2].second.shape(), (Shape{7, 64}));
  Tensor y = m->forward(normal_tensor({3, 3, 32, 32}, 32));
  EXPECT_EQ(y.shape(), (Shape{3, 7}));
  EXPECT_THROW(nn::make_model("resnet20", 0), InputError);

  std::string msg = input_error([] { nn::make_model("resnet99"); });
  EXPECT_NE(msg.find("resnet99"), std::string::npos) << msg;
  for (const char* n : {"lenet", "resnet20", "resnet32", "resnet56", "cifar_resnet18"})
    EXPECT_NE(msg.find(n), std::string::npos) << n << " not listed in: " << msg;
  auto names = nn::model_names();
  for (const char* n : {"resnet20", "resnet32", "resnet56", "cifar_resnet18"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}
