// Tests of nn::BatchNorm2d: PyTorch's defaults, batch statistics in training, running statistics
// with momentum and the unbiased variance, eval mode, and a bad input shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// Per-channel (mean, biased variance, unbiased variance) of an (N, C, H, W) tensor, in double.
struct ChannelStats {
  std::vector<double> mean, var, var_unbiased;
};
ChannelStats rs_channel_stats(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  std::vector<double> v = x.to_vector_f64();
  ChannelStats s;
  for (int64_t k = 0; k < c; ++k) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) sum += v[static_cast<size_t>((i * c + k) * hw + j)];
    const double m = n * hw;
    const double mean = sum / m;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        double d = v[static_cast<size_t>((i * c + k) * hw + j)] - mean;
        ss += d * d;
      }
    s.mean.push_back(mean);
    s.var.push_back(ss / m);
    s.var_unbiased.push_back(ss / (m - 1));
  }
  return s;
}

// (N, C, H, W) with channel k drawn from N(shift[k], scale[k]^2).
Tensor rs_channel_input(int64_t n, int64_t h, int64_t w, const std::vector<double>& shift,
                        const std::vector<double>& scale, uint64_t seed) {
  const int64_t c = static_cast<int64_t>(shift.size());
  Rng rng(seed, 12);
  std::vector<float> v(static_cast<size_t>(n * c * h * w));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t j = 0; j < h * w; ++j)
        v[static_cast<size_t>((i * c + k) * h * w + j)] = static_cast<float>(
            shift[static_cast<size_t>(k)] + scale[static_cast<size_t>(k)] * rng.normal());
  return Tensor::from_vector(v, {n, c, h, w});
}

}  // namespace

// ---- BatchNorm2d -------------------------------------------------------------------------------

TEST(ResnetBatchNorm, DefaultsMatchTorch) {
  nn::BatchNorm2d bn(5);
  EXPECT_EQ(bn.eps, 1e-5);
  EXPECT_EQ(bn.momentum, 0.1);
  EXPECT_EQ(bn.weight.shape(), (Shape{5}));
  EXPECT_EQ(bn.weight.to_vector(), std::vector<float>(5, 1.f));
  EXPECT_EQ(bn.bias.to_vector(), std::vector<float>(5, 0.f));
  EXPECT_EQ(bn.running_mean.to_vector(), std::vector<float>(5, 0.f));
  EXPECT_EQ(bn.running_var.to_vector(), std::vector<float>(5, 1.f));
  EXPECT_TRUE(bn.weight.requires_grad());
  EXPECT_TRUE(bn.bias.requires_grad());
  EXPECT_FALSE(bn.running_mean.requires_grad());
  ASSERT_TRUE(bn.num_batches_tracked.defined());
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::kInt64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.num_batches_tracked.numel(), 1);
  EXPECT_EQ(bn.num_batches_tracked.item(), 0.0);
  // torch's names and order: parameters, then buffers.
  std::vector<std::string> names;
  for (auto& [n, t] : bn.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"}));
  EXPECT_EQ(bn.named_parameters().size(), 2u);
  EXPECT_EQ(bn.named_buffers().size(), 3u);
  EXPECT_THROW(nn::BatchNorm2d(0), InputError);
}

TEST(ResnetBatchNorm, TrainingNormalisesPerChannelAndUpdatesRunningStats) {
  const std::vector<double> shift = {2.0, -1.0, 0.5}, scale = {3.0, 0.5, 1.0};
  nn::BatchNorm2d bn(3);
  ASSERT_TRUE(bn.is_training());
  // Small N*H*W (24) so the unbiased and biased variances differ clearly (factor 24/23).
  Tensor x1 = rs_channel_input(2, 3, 4, shift, scale, 1);
  ChannelStats s1 = rs_channel_stats(x1);
  Tensor y1 = bn(x1);
  ASSERT_EQ(y1.shape(), x1.shape());
  ASSERT_EQ(y1.dtype(), DType::kFloat32);
  ChannelStats sy = rs_channel_stats(y1);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(sy.mean[k], 0.0, 1e-4) << "channel " << k;
    // var(y) = var / (var + eps): 1 within 1e-4 for these variances.
    EXPECT_NEAR(sy.var[k], 1.0, 1e-4) << "channel " << k;
  }
  // Element by element: (x - mean) / sqrt(var + eps).
  {
    std::vector<double> xv = x1.to_vector_f64(), yv = y1.to_vector_f64();
    for (size_t i = 0; i < xv.size(); ++i) {
      size_t k = (i / 12) % 3;
      double want = (xv[i] - s1.mean[k]) / std::sqrt(s1.var[k] + 1e-5);
      ASSERT_NEAR(yv[i], want, 1e-4) << "element " << i;
    }
  }
  // running = 0.9 running + 0.1 batch, with the unbiased variance.
  std::vector<float> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(rm[k], 0.1 * s1.mean[k], 1e-5 * (1 + std::fabs(s1.mean[k]))) << k;
    const double want_v = 0.9 + 0.1 * s1.var_unbiased[k];
    EXPECT_NEAR(rv[k], want_v, 1e-5 * want_v)
        << "channel " << k << " (biased would give " << 0.9 + 0.1 * s1.var[k] << ")";
  }
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);

  // A second batch with an affine weight and bias.
  Tensor(bn.weight).copy_(Tensor::from_vector({2.f, 0.5f, -1.f}, {3}));
  Tensor(bn.bias).copy_(Tensor::from_vector({0.1f, -0.2f, 0.3f}, {3}));
  const std::vector<double> w = {2, 0.5, -1}, b = {0.1, -0.2, 0.3};
  Tensor x2 = rs_channel_input(2, 3, 4, {-3.0, 4.0, 0.0}, {0.7, 2.0, 1.5}, 2);
  ChannelStats s2 = rs_channel_stats(x2);
  Tensor y2 = bn(x2);
  std::vector<double> xv = x2.to_vector_f64(), yv = y2.to_vector_f64();
  for (size_t i = 0; i < xv.size(); ++i) {
    size_t k = (i / 12) % 3;
    double want = (xv[i] - s2.mean[k]) / std::sqrt(s2.var[k] + 1e-5) * w[k] + b[k];
    ASSERT_NEAR(yv[i], want, 1e-4 * (1 + std::fabs(want))) << "element " << i;
  }
  std::vector<float> rm2 = bn.running_mean.to_vector(), rv2 = bn.running_var.to_vector();
  for (int k = 0; k < 3; ++k) {
    const double want_m = 0.9 * rm[k] + 0.1 * s2.mean[k];
    const double want_v = 0.9 * rv[k] + 0.1 * s2.var_unbiased[k];
    EXPECT_NEAR(rm2[k], want_m, 1e-5 * (1 + std::fabs(want_m))) << k;
    EXPECT_NEAR(rv2[k], want_v, 1e-5 * want_v) << k;
  }
  EXPECT_EQ(bn.num_batches_tracked.item(), 2.0);
}

TEST(ResnetBatchNorm, EvalUsesTheRunningStatistics) {
  nn::BatchNorm2d bn(2, /*eps=*/1e-3);
  const std::vector<double> rm = {0.5, -2.0}, rv = {4.0, 0.25}, w = {1.5, -0.5}, b = {0.2, 1.0};
  Tensor(bn.running_mean).copy_(Tensor::from_vector({0.5f, -2.f}, {2}));
  Tensor(bn.running_var).copy_(Tensor::from_vector({4.f, 0.25f}, {2}));
  Tensor(bn.weight).copy_(Tensor::from_vector({1.5f, -0.5f}, {2}));
  Tensor(bn.bias).copy_(Tensor::from_vector({0.2f, 1.f}, {2}));
  bn.eval();
  Tensor x = normal_tensor({3, 2, 4, 5}, 3, 2.0, 1.0);
  Tensor y = bn(x);
  std::vector<double> xv = x.to_vector_f64(), yv = y.to_vector_f64();
  for (size_t i = 0; i < xv.size(); ++i) {
    size_t k = (i / 20) % 2;
    double want = (xv[i] - rm[k]) / std::sqrt(rv[k] + 1e-3) * w[k] + b[k];
    ASSERT_NEAR(yv[i], want, 1e-5 * (1 + std::fabs(want))) << "element " << i;
  }
  // Nothing is updated in eval mode.
  EXPECT_EQ(bn.running_mean.to_vector(), (std::vector<float>{0.5f, -2.f}));
  EXPECT_EQ(bn.running_var.to_vector(), (std::vector<float>{4.f, 0.25f}));
  EXPECT_EQ(bn.num_batches_tracked.item(), 0.0);
  // A single sample gives the same values as in the batch (no batch statistics involved).
  const std::vector<float> xall = x.to_vector();
  Tensor one =
      Tensor::from_vector(std::vector<float>(xall.begin(), xall.begin() + 40), {1, 2, 4, 5});
  std::vector<float> y1 = bn(one).to_vector(), yall = y.to_vector();
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(y1[i], yall[i]) << i;
}

TEST(ResnetBatchNorm, BadInputShapeIsAnInputError) {
  nn::BatchNorm2d bn(3);
  std::string msg = input_error([&] { bn(Tensor::zeros({2, 4, 5, 5})); });
  EXPECT_NE(msg.find("(2, 4, 5, 5)"), std::string::npos) << msg;
  msg = input_error([&] { bn(Tensor::zeros({2, 3})); });
  EXPECT_NE(msg.find("(2, 3)"), std::string::npos) << msg;
  bn.eval();
  EXPECT_THROW(bn(Tensor::zeros({1, 2, 3, 3})), InputError);
  // A refused batch counts nothing.
  EXPECT_EQ(bn.num_batches_tracked.item(), 0.0);
}
