// Tests of the ResNet features: nn::BatchNorm2d (defaults, batch statistics, running statistics
// with momentum and the unbiased variance, eval mode), dropout (rate, scaling, identity cases,
// reproducible masks), Cutout inside Compose, optim::EMA, optim::AdamW (options, state, exact
// resume), optim::clip_grad_norm, the resnet models, bfloat16 convolutions, and the `hpcnet train`
// flags that drive them end to end (AdamW + EMA + clipping + Cutout, bit-exact resume, refusals).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "src/ops/ops.h"
#include "test_util.h"

#ifndef HPCNET_BINARY
#error "HPCNET_BINARY (the hpcnet executable) must be defined by the build"
#endif

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// ---- helpers -----------------------------------------------------------------------------------

// Standard normal values (float32), reproducible from seed.
Tensor rs_randn(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Rng rng(seed, 11);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = static_cast<float>(shift + scale * rng.normal());
  return Tensor::from_vector(v, s);
}

// Max |a - b| and max |b| over two equally shaped tensors.
std::pair<double, double> rs_max_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector_f64(), vb = b.to_vector_f64();
  EXPECT_EQ(va.size(), vb.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < std::min(va.size(), vb.size()); ++i) {
    d = std::max(d, std::fabs(va[i] - vb[i]));
    m = std::max(m, std::fabs(vb[i]));
  }
  return {d, m};
}

std::map<std::string, Tensor> rs_clone_map(const nn::NamedTensors& ts) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : ts) out.emplace(n, t.clone());
  return out;
}

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
        v[static_cast<size_t>((i * c + k) * h * w + j)] =
            static_cast<float>(shift[static_cast<size_t>(k)] +
                               scale[static_cast<size_t>(k)] * rng.normal());
  return Tensor::from_vector(v, {n, c, h, w});
}

// Sets the convolution precision for a scope and always restores float32.
class ConvPrecisionGuard {
 public:
  explicit ConvPrecisionGuard(ops::Precision p) { ops::set_conv_precision(p); }
  ~ConvPrecisionGuard() { ops::set_conv_precision(ops::Precision::kFloat32); }
  ConvPrecisionGuard(const ConvPrecisionGuard&) = delete;
  ConvPrecisionGuard& operator=(const ConvPrecisionGuard&) = delete;
};

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
    EXPECT_NEAR(rv[k], want_v, 1e-5 * want_v) << "channel " << k << " (biased would give "
                                              << 0.9 + 0.1 * s1.var[k] << ")";
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
    double want =
        (xv[i] - s2.mean[k]) / std::sqrt(s2.var[k] + 1e-5) * w[k] + b[k];
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
  Tensor x = rs_randn({3, 2, 4, 5}, 3, 2.0, 1.0);
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
  Tensor one = Tensor::from_vector(std::vector<float>(xall.begin(), xall.begin() + 40), {1, 2, 4, 5});
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

// ---- dropout -----------------------------------------------------------------------------------

TEST(ResnetDropout, TrainingZeroesAboutPAndScalesTheRest) {
  const int64_t n = 100000;
  Rng rng(5);
  std::vector<float> xv(static_cast<size_t>(n));
  for (float& v : xv) v = rng.uniform(0.5f, 1.5f);  // never zero
  Tensor x = Tensor::from_vector(xv, {n});
  manual_seed(7);
  Tensor y = F::dropout(x, 0.3, true);
  ASSERT_EQ(y.shape(), x.shape());
  std::vector<float> yv = y.to_vector();
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv[i] == 0.f) {
      ++zeros;
      continue;
    }
    const double want = xv[i] / 0.7;
    ASSERT_NEAR(yv[i], want, 1e-6 * want) << "element " << i;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / n, 0.3, 0.01);
  // The input is untouched.
  EXPECT_EQ(x.to_vector(), xv);
}

TEST(ResnetDropout, IdentityCasesAndPOne) {
  Tensor x = rs_randn({4, 50}, 6);
  const std::vector<float> xv = x.to_vector();
  EXPECT_EQ(F::dropout(x, 0.0, true).to_vector(), xv);
  EXPECT_EQ(F::dropout(x, 0.5, false).to_vector(), xv);
  EXPECT_EQ(F::dropout(x, 1.0, false).to_vector(), xv);
  std::vector<float> all = F::dropout(x, 1.0, true).to_vector();
  for (float v : all) ASSERT_EQ(v, 0.f);
  EXPECT_EQ(all.size(), xv.size());
  for (float v : all) ASSERT_FALSE(std::isnan(v));
}

TEST(ResnetDropout, ManualSeedReproducesTheMask) {
  Tensor x = Tensor::full({2000}, 1.0);
  manual_seed(42);
  std::vector<float> a = F::dropout(x, 0.5, true).to_vector();
  std::vector<float> next = F::dropout(x, 0.5, true).to_vector();
  manual_seed(42);
  std::vector<float> b = F::dropout(x, 0.5, true).to_vector();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, next);  // the generator advances
  manual_seed(43);
  EXPECT_NE(F::dropout(x, 0.5, true).to_vector(), a);
}

TEST(ResnetDropout, ProbabilityOutsideZeroOneThrows) {
  Tensor x = Tensor::full({10}, 1.0);
  EXPECT_ANY_THROW(F::dropout(x, -0.1, true));
  EXPECT_ANY_THROW(F::dropout(x, 1.5, true));
  EXPECT_ANY_THROW(F::dropout(x, std::nan(""), true));
  EXPECT_THROW(nn::Dropout(-0.1), InputError);
  EXPECT_THROW(nn::Dropout(1.01), InputError);
  EXPECT_NO_THROW(nn::Dropout(0.0));
  EXPECT_NO_THROW(nn::Dropout(1.0));
}

TEST(ResnetDropout, ModuleFollowsTrainAndEvalAndBackpropagatesTheMask) {
  nn::Dropout d(0.5);
  Tensor x = rs_randn({1000}, 8, 1.0, 5.0);  // all far from zero
  const std::vector<float> xv = x.to_vector();
  ASSERT_TRUE(d.is_training());
  auto count_zeros = [](const std::vector<float>& v) {
    return std::count(v.begin(), v.end(), 0.f);
  };
  manual_seed(1);
  EXPECT_GT(count_zeros(d(x).to_vector()), 400);
  d.eval();
  EXPECT_EQ(d(x).to_vector(), xv);
  d.train();
  EXPECT_GT(count_zeros(d(x).to_vector()), 400);

  // Gradient: 1 / (1 - p) where kept, 0 where dropped.
  Tensor xg = x.clone();
  xg.set_requires_grad(true);
  Tensor y = d(xg);
  F::sum(y).backward();
  ASSERT_TRUE(xg.grad().defined());
  std::vector<float> yv = y.to_vector(), gv = xg.grad().to_vector();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(gv[i], yv[i] == 0.f ? 0.f : 2.f) << i;
}

// ---- Cutout ------------------------------------------------------------------------------------

namespace {

struct Hole {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator<(const Hole& o) const {
    return std::tie(top, left, height, width) < std::tie(o.top, o.left, o.height, o.width);
  }
};

// The zero rectangle of a (3, H, W) sample that is `one` elsewhere; ADD_FAILUREs when the zeros
// are not one rectangle shared by all channels.
Hole rs_find_hole(const std::vector<float>& out, int64_t h, int64_t w, float one,
                  const std::string& what) {
  int64_t top = h, left = w, bottom = -1, right = -1, zeros = 0;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const float v0 = out[static_cast<size_t>(y * w + x)];
      for (int c = 1; c < 3; ++c)
        if (out[static_cast<size_t>((c * h + y) * w + x)] != v0) {
          ADD_FAILURE() << what << ": channels differ at (" << y << ", " << x << ")";
          return {};
        }
      if (v0 == 0.f) {
        ++zeros;
        top = std::min(top, y);
        bottom = std::max(bottom, y);
        left = std::min(left, x);
        right = std::max(right, x);
      } else if (v0 != one) {
        ADD_FAILURE() << what << ": value " << v0 << " at (" << y << ", " << x << ")";
        return {};
      }
    }
  if (zeros == 0) return {};
  Hole hole{top, left, bottom - top + 1, right - left + 1};
  EXPECT_EQ(zeros, hole.height * hole.width) << what << ": the zeros are not a rectangle";
  return hole;
}

std::vector<uint8_t> rs_white(int64_t h, int64_t w) {
  return std::vector<uint8_t>(static_cast<size_t>(h * w * 3), 255);
}

}  // namespace

TEST(ResnetCutout, ZeroesOneClippedSquareAndIsReproducible) {
  const std::vector<uint8_t> px = rs_white(32, 32);
  data::Example ex{px.data(), 32, 32, 0};
  data::Compose tf({data::ToTensor{}, data::Cutout{16}});
  EXPECT_EQ(tf.output_shape(32, 32), (std::array<int64_t, 3>{3, 32, 32}));
  std::vector<float> out(3 * 32 * 32), again(3 * 32 * 32);
  std::set<Hole> holes;
  int inside = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::string what = "seed " + std::to_string(seed);
    std::fill(out.begin(), out.end(), NAN);
    tf.apply(ex, seed, out.data());
    Hole hole = rs_find_hole(out, 32, 32, 1.f, what);
    // Centred at (cy, cx) in [0, 32): rows [cy - 8, cy + 8) clipped, so 8..16 rows and columns.
    EXPECT_GE(hole.height, 8) << what;
    EXPECT_LE(hole.height, 16) << what;
    EXPECT_GE(hole.width, 8) << what;
    EXPECT_LE(hole.width, 16) << what;
    const bool touches = hole.top == 0 || hole.left == 0 || hole.top + hole.height == 32 ||
                         hole.left + hole.width == 32;
    if (!touches) {
      EXPECT_EQ(hole.height * hole.width, 256) << what << ": a hole inside the image is 16x16";
      ++inside;
    } else {
      EXPECT_LE(hole.height * hole.width, 256) << what;
    }
    if (hole.height < 16) EXPECT_TRUE(hole.top == 0 || hole.top + hole.height == 32) << what;
    if (hole.width < 16) EXPECT_TRUE(hole.left == 0 || hole.left + hole.width == 32) << what;
    holes.insert(hole);
    // The same seed gives the same hole.
    std::fill(again.begin(), again.end(), NAN);
    tf.apply(ex, seed, again.data());
    EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)), 0) << what;
  }
  EXPECT_GT(inside, 0) << "no hole fully inside the image in 20 seeds";
  EXPECT_GT(holes.size(), 10u) << "holes barely depend on the seed";

  // The zeros are in the output's units, after Normalize: (1 - 0.5) / 0.5 = 1 elsewhere.
  data::Compose norm({data::ToTensor{}, data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}},
                      data::Cutout{16}});
  norm.apply(ex, 3, out.data());
  Hole h = rs_find_hole(out, 32, 32, 1.f, "normalized");
  EXPECT_GE(h.height * h.width, 64);
}

TEST(ResnetCutout, OrderIsCheckedAndStrNamesIt) {
  std::string msg = input_error([] { data::Compose({data::Cutout{16}, data::ToTensor{}}); });
  EXPECT_NE(msg.find("Cutout"), std::string::npos) << msg;
  msg = input_error([] {
    data::Compose({data::ToTensor{}, data::Cutout{8}, data::RandomCrop{32, 4}});
  });
  EXPECT_NE(msg.find("Cutout"), std::string::npos) << msg;
  EXPECT_THROW(data::Compose({data::RandomCrop{32, 4}, data::Cutout{8}, data::ToTensor{}}),
               InputError);
  data::Compose ok({data::RandomCrop{32, 4}, data::RandomHorizontalFlip{}, data::ToTensor{},
                    data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}, data::Cutout{16}});
  EXPECT_NE(ok.str().find("Cutout(16)"), std::string::npos) << ok.str();
  EXPECT_NE(data::Compose({data::ToTensor{}, data::Cutout{8}}).str().find("Cutout(8)"),
            std::string::npos);
}

// ---- EMA ---------------------------------------------------------------------------------------

namespace {

// conv -> batch norm -> pool -> linear: float parameters, float buffers and an int64 buffer.
std::shared_ptr<nn::Sequential> rs_small_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1))
      .add(std::make_shared<nn::BatchNorm2d>(4))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::GlobalAvgPool2d>())
      .add(std::make_shared<nn::Linear>(4, 2));
  return net;
}

std::map<std::string, std::vector<double>> rs_values(const nn::NamedTensors& ts,
                                                     const std::string& strip = "") {
  std::map<std::string, std::vector<double>> out;
  for (auto& [n, t] : ts) out[n.substr(strip.size())] = t.to_vector_f64();
  return out;
}

}  // namespace

TEST(ResnetEma, TracksTheAverageSwapsAndRoundTrips) {
  auto net = rs_small_net(1);
  optim::EMA ema(*net, 0.9);
  EXPECT_EQ(ema.decay(), 0.9);
  const auto sd = net->state_dict();
  auto esd = ema.state_dict();
  ASSERT_EQ(esd.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(esd[i].first, "ema." + sd[i].first);
    EXPECT_TRUE(same_bytes(esd[i].second, sd[i].second)) << sd[i].first;
    EXPECT_NE(esd[i].second.raw_data(), sd[i].second.raw_data()) << "a copy, not shared";
  }
  const auto old = rs_values(sd);

  // New weights (and running statistics, and a batch count) in the model.
  {
    NoGradGuard ng;
    uint64_t s = 100;
    for (auto& [n, p] : net->named_parameters()) Tensor(p).copy_(rs_randn(p.shape(), s++));
  }
  net->forward(rs_randn({2, 3, 6, 6}, 9));  // training mode: running stats move, count = 1
  // Not updated yet: the averages are still the old values.
  EXPECT_EQ(rs_values(ema.state_dict(), "ema."), old);
  const auto fresh = rs_values(net->state_dict());
  ema.update(*net);
  auto avg = rs_values(ema.state_dict(), "ema.");
  for (auto& [n, v] : avg) {
    const auto& o = old.at(n);
    const auto& f = fresh.at(n);
    ASSERT_EQ(v.size(), f.size()) << n;
    if (n.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(v, f) << "integer buffers are copied";
      EXPECT_EQ(v[0], 1.0);
      continue;
    }
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_NEAR(v[i], 0.9 * o[i] + 0.1 * f[i], 1e-6 * (1 + std::fabs(f[i]))) << n << "[" << i
                                                                               << "]";
  }
  // The model itself is untouched by update().
  EXPECT_EQ(rs_values(net->state_dict()), fresh);

  // swap: averages into the model, trained weights into the EMA; twice restores.
  ema.swap(*net);
  EXPECT_EQ(rs_values(net->state_dict()), avg);
  EXPECT_EQ(rs_values(ema.state_dict(), "ema."), fresh);
  ema.swap(*net);
  EXPECT_EQ(rs_values(net->state_dict()), fresh);
  EXPECT_EQ(rs_values(ema.state_dict(), "ema."), avg);
  // The model still trains after the swaps (parameters keep requires_grad).
  for (auto& [n, p] : net->named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;

  // state_dict -> load_state_dict round trip into another EMA.
  auto other = rs_small_net(2);
  optim::EMA ema2(*other, 0.5);
  ASSERT_NE(rs_values(ema2.state_dict(), "ema."), avg);
  const auto saved = rs_clone_map(ema.state_dict());
  ema2.load_state_dict(saved);
  EXPECT_EQ(rs_values(ema2.state_dict(), "ema."), avg);
  ema2.swap(*other);
  EXPECT_EQ(rs_values(other->state_dict()), avg);
}

TEST(ResnetEma, BadStateAndDecayAreRefused) {
  auto net = rs_small_net(3);
  optim::EMA ema(*net, 0.99);
  const auto before = rs_values(ema.state_dict());
  auto state = rs_clone_map(ema.state_dict());
  ASSERT_TRUE(state.count("ema.4.bias"));
  state["ema.4.bias"] = Tensor::zeros({3});
  std::string msg = input_error([&] { ema.load_state_dict(state); });
  EXPECT_NE(msg.find("ema.4.bias"), std::string::npos) << msg;
  EXPECT_EQ(rs_values(ema.state_dict()), before) << "nothing loaded from a bad state";
  state = rs_clone_map(ema.state_dict());
  state.erase("ema.1.running_var");
  msg = input_error([&] { ema.load_state_dict(state); });
  EXPECT_NE(msg.find("ema.1.running_var"), std::string::npos) << msg;
  EXPECT_EQ(rs_values(ema.state_dict()), before);

  for (double d : {0.0, 1.0, 1.5, -0.1, std::nan("")})
    EXPECT_THROW(optim::EMA(*net, d), InputError) << d;
}

// ---- AdamW -------------------------------------------------------------------------------------

TEST(ResnetAdamW, InvalidOptionsAreInputErrors) {
  nn::Linear lin(3, 2);
  auto make = [&](optim::AdamWOptions o) { optim::AdamW opt(lin.named_parameters(), o); };
  optim::AdamWOptions o;
  o.lr = -1e-3;
  EXPECT_NE(input_error([&] { make(o); }).find("learning rate"), std::string::npos);
  o = {};
  o.lr = std::nan("");
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.beta1 = 1.0;
  EXPECT_NE(input_error([&] { make(o); }).find("beta"), std::string::npos);
  o = {};
  o.beta2 = 1.5;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.beta1 = -0.1;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.eps = -1e-8;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.weight_decay = -0.01;
  EXPECT_THROW(make(o), InputError);
  o = {};
  EXPECT_NO_THROW(make(o));
  o.lr = 0;
  o.beta1 = 0;
  EXPECT_NO_THROW(make(o));
}

// Two steps on hand-set gradients against torch.optim.AdamW's rule, written out in double.
TEST(ResnetAdamW, StepFollowsTheTorchRuleAndStateIsNamed) {
  nn::Linear lin(2, 1);
  Tensor w = lin.weight, b = lin.bias;
  Tensor(w).copy_(Tensor::from_vector({1.f, -2.f}, {1, 2}));
  Tensor(b).copy_(Tensor::from_vector({0.5f}, {1}));
  optim::AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.05;
  optim::AdamW opt(lin.named_parameters(), o);
  auto sd = opt.state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.bias", "exp_avg.weight", "exp_avg_sq.bias",
                                             "exp_avg_sq.weight"}));
  for (auto& [n, t] : sd) {
    EXPECT_EQ(t.shape(), n.find("weight") != std::string::npos ? (Shape{1, 2}) : (Shape{1})) << n;
    for (float v : t.to_vector()) EXPECT_EQ(v, 0.f) << n;
  }

  std::vector<double> p = {1, -2}, m(2, 0), v(2, 0);
  const std::vector<std::vector<double>> gs = {{0.5, -0.25}, {-1, 2}};
  for (int s = 0; s < 2; ++s) {
    const auto& g = gs[s];
    w.set_grad(Tensor::from_vector({static_cast<float>(g[0]), static_cast<float>(g[1])}, {1, 2}));
    b.set_grad(Tensor::zeros({1}));
    opt.step();
    const int t = s + 1;
    for (int i = 0; i < 2; ++i) {
      p[i] *= 1 - 0.1 * 0.05;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(0.9, t));
      const double vhat = v[i] / (1 - std::pow(0.999, t));
      p[i] -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    std::vector<float> got = w.to_vector();
    EXPECT_NEAR(got[0], p[0], 1e-6) << "step " << t;
    EXPECT_NEAR(got[1], p[1], 1e-6) << "step " << t;
  }
  EXPECT_EQ(opt.steps(), 2);
  std::map<std::string, Tensor> st;
  for (auto& [n, t] : opt.state_dict()) st.emplace(n, t);
  std::vector<float> ev = st.at("exp_avg.weight").to_vector();
  std::vector<float> sv = st.at("exp_avg_sq.weight").to_vector();
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(ev[i], m[i], 1e-6);
    EXPECT_NEAR(sv[i], v[i], 1e-6);
  }
}

TEST(ResnetAdamW, RestoredStateGivesBitIdenticalSteps) {
  auto a = rs_small_net(10);
  optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.05;
  optim::AdamW opt_a(a->named_parameters(), o);
  Tensor x = rs_randn({4, 3, 6, 6}, 20);
  Tensor y = Tensor::from_labels({0, 1, 1, 0});
  auto step = [&](nn::Module& m, optim::Optimizer& opt) {
    opt.zero_grad();
    F::cross_entropy(m.forward(x), y).backward();
    opt.step();
  };
  step(*a, opt_a);
  step(*a, opt_a);
  const auto mstate = rs_clone_map(a->state_dict());
  const auto ostate = rs_clone_map(opt_a.state_dict());
  EXPECT_EQ(ostate.size(), 2 * a->named_parameters().size());
  for (auto& [n, t] : ostate)
    EXPECT_TRUE(n.rfind("exp_avg.", 0) == 0 || n.rfind("exp_avg_sq.", 0) == 0) << n;

  auto b = rs_small_net(11);
  optim::AdamW opt_b(b->named_parameters(), o);
  b->load_state_dict(mstate);
  opt_b.load_state_dict(ostate, opt_a.steps());
  EXPECT_EQ(opt_b.steps(), 2);
  step(*a, opt_a);
  step(*b, opt_b);
  auto pa = a->state_dict(), pb = b->state_dict();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bytes(pa[i].second, pb[i].second)) << pa[i].first << " differs";

  // Negative control: the same moments with a wrong step count (bias correction) differ.
  auto c = rs_small_net(12);
  optim::AdamW opt_c(c->named_parameters(), o);
  c->load_state_dict(mstate);
  opt_c.load_state_dict(ostate, 0);
  step(*c, opt_c);
  EXPECT_FALSE(same_bytes(a->named_parameters()[0].second, c->named_parameters()[0].second));

  // Bad state.
  auto bad = ostate;
  bad["exp_avg.4.weight"] = Tensor::zeros({3, 3});
  std::string msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("exp_avg.4.weight"), std::string::npos) << msg;
  bad = ostate;
  bad.erase("exp_avg_sq.0.bias");
  msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("exp_avg_sq.0.bias"), std::string::npos) << msg;
  bad = ostate;
  bad.emplace("momentum_buffer.0.weight", Tensor::zeros({4, 3, 3, 3}));
  EXPECT_THROW(opt_b.load_state_dict(bad, 3), InputError);
}

// ---- clip_grad_norm ----------------------------------------------------------------------------

TEST(ResnetClipGradNorm, ReturnsTheTotalNormAndScalesOnlyAboveTheLimit) {
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({1, 1}), none = Tensor::zeros({3});
  for (Tensor* t : {&a, &b, &none}) t->set_requires_grad(true);
  auto set = [&] {
    a.set_grad(Tensor::from_vector({3.f, 4.f}, {2}));
    b.set_grad(Tensor::from_vector({-12.f}, {1, 1}));
  };
  const std::vector<Tensor> params = {a, none, b};
  set();
  EXPECT_NEAR(optim::clip_grad_norm(params, 26.0), 13.0, 1e-9);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3.f, 4.f}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{-12.f}));
  EXPECT_FALSE(none.grad().defined());

  set();
  EXPECT_NEAR(optim::clip_grad_norm(params, 6.5), 13.0, 1e-9);  // the norm before clipping
  std::vector<float> ga = a.grad().to_vector(), gb = b.grad().to_vector();
  EXPECT_NEAR(ga[0], 1.5, 1.5e-6);
  EXPECT_NEAR(ga[1], 2.0, 2e-6);
  EXPECT_NEAR(gb[0], -6.0, 6e-6);
  EXPECT_FALSE(none.grad().defined());
  // Clipped gradients now have norm 6.5 (less 1e-6 / 2): a larger limit leaves them alone.
  EXPECT_NEAR(optim::clip_grad_norm(params, 7.0), 6.5, 1e-5);
  EXPECT_EQ(a.grad().to_vector(), ga);
  EXPECT_EQ(b.grad().to_vector(), gb);

  // Only parameters without gradients: norm 0, nothing happens.
  EXPECT_EQ(optim::clip_grad_norm({none}, 1.0), 0.0);
  EXPECT_THROW(optim::clip_grad_norm(params, 0.0), InputError);
}

// ---- models ------------------------------------------------------------------------------------

TEST(ResnetModels, CifarResnetsForwardInTrainAndEvalMode) {
  // He et al.'s CIFAR ResNets with option-A shortcuts: 6n+2 layers.
  const std::vector<std::pair<std::string, int64_t>> models = {
      {"resnet20", 269722}, {"resnet32", 464154}, {"resnet56", 853018}};
  Tensor x = rs_randn({2, 3, 32, 32}, 30);
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
    const auto buffers = rs_values(m->named_buffers());
    Tensor ye = m->forward(x);
    ASSERT_EQ(ye.shape(), (Shape{2, 10})) << name;
    for (float v : ye.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
    EXPECT_NE(ye.to_vector(), y.to_vector()) << name << ": eval must use the running statistics";
    EXPECT_EQ(rs_values(m->named_buffers()), buffers) << name << ": eval updated the buffers";
    EXPECT_EQ(m->forward(x).to_vector(), ye.to_vector()) << name << ": eval is deterministic";
  }
}

TEST(ResnetModels, Resnet18ForwardOnCifar) {
  manual_seed(0);
  auto m = nn::make_model("resnet18");
  EXPECT_EQ(m->num_parameters(), 11173962);  // the CIFAR ResNet-18 (kuangliu/pytorch-cifar)
  Tensor y = m->forward(rs_randn({2, 3, 32, 32}, 31));
  ASSERT_EQ(y.shape(), (Shape{2, 10}));
  for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
}

TEST(ResnetModels, NumClassesAndUnknownNames) {
  manual_seed(0);
  auto m = nn::make_model("resnet20", 7);
  auto params = m->named_parameters();
  EXPECT_EQ(params.back().second.shape(), (Shape{7}));
  EXPECT_EQ(params[params.size() - 2].second.shape(), (Shape{7, 64}));
  Tensor y = m->forward(rs_randn({3, 3, 32, 32}, 32));
  EXPECT_EQ(y.shape(), (Shape{3, 7}));
  EXPECT_THROW(nn::make_model("resnet20", 0), InputError);

  std::string msg = input_error([] { nn::make_model("resnet99"); });
  EXPECT_NE(msg.find("resnet99"), std::string::npos) << msg;
  for (const char* n : {"lenet", "resnet20", "resnet32", "resnet56", "resnet18"})
    EXPECT_NE(msg.find(n), std::string::npos) << n << " not listed in: " << msg;
  auto names = nn::model_names();
  for (const char* n : {"resnet20", "resnet32", "resnet56", "resnet18"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// ---- bfloat16 convolutions ---------------------------------------------------------------------

TEST(ResnetBf16, ConvForwardAndBackwardRunInBfloat16) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  ASSERT_EQ(ops::conv_precision(), ops::Precision::kFloat32);
  Tensor x = rs_randn({4, 16, 8, 8}, 40);
  Tensor w = rs_randn({32, 16, 3, 3}, 41, 0.1);
  Tensor b = rs_randn({32}, 42, 0.1);
  Tensor dy = rs_randn({4, 32, 8, 8}, 43);
  const std::vector<float> x0 = x.to_vector(), w0 = w.to_vector();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  struct Out {
    Tensor y, dx, dw, db;
  };
  auto run = [&](const Tensor& xin, const Tensor& win) {
    zero_grads({xin, win, b}, /*set_to_none=*/true);
    Tensor y = F::conv2d(xin, win, b, 1, 1);
    EXPECT_EQ(y.dtype(), DType::kFloat32);
    y.backward(dy);
    return Out{y.detach(), xin.grad(), win.grad(), b.grad()};
  };
  Out f32 = run(x, w);
  Out bf;
  {
    ConvPrecisionGuard guard(ops::Precision::kBFloat16);
    ASSERT_EQ(ops::conv_precision(), ops::Precision::kBFloat16);
    bf = run(x, w);
  }
  EXPECT_EQ(ops::conv_precision(), ops::Precision::kFloat32);
  // The tensors stay float32 and the inputs are not rounded in place.
  EXPECT_EQ(x.to_vector(), x0);
  EXPECT_EQ(w.to_vector(), w0);
  for (auto [what, a, r] : {std::tuple<const char*, Tensor, Tensor>{"y", bf.y, f32.y},
                            {"dx", bf.dx, f32.dx},
                            {"dw", bf.dw, f32.dw}}) {
    ASSERT_TRUE(a.defined()) << what;
    EXPECT_EQ(a.dtype(), DType::kFloat32) << what;
    auto [diff, scale] = rs_max_diff(a, r);
    EXPECT_LT(diff, 2e-2 * scale) << what << ": bf16 too far from fp32";
    EXPECT_GT(diff, 0.0) << what << ": identical to fp32, so bf16 did not run";
  }
  auto [ddb, sdb] = rs_max_diff(bf.db, f32.db);
  EXPECT_LT(ddb, 2e-2 * sdb);

  // bf16 mode = float32 arithmetic on bf16-rounded inputs (products exact, float32 sums).
  Tensor xr = x.detach().to(DType::kBFloat16).to(DType::kFloat32);
  Tensor wr = w.detach().to(DType::kBFloat16).to(DType::kFloat32);
  Tensor yr = F::conv2d(xr, wr, b.detach(), 1, 1);
  auto [dr, sr] = rs_max_diff(bf.y, yr);
  EXPECT_LT(dr, 1e-5 * sr) << "bf16 forward is not a conv of bf16-rounded inputs";
}

// The other order on a fresh shape: a bf16 convolution first must not make the float32 one that
// follows compute in bf16 (each precision has its own kernel).
TEST(ResnetBf16, Float32AfterBfloat16IsStillFloat32) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  Tensor x = rs_randn({2, 16, 6, 6}, 44);
  Tensor w = rs_randn({16, 16, 3, 3}, 45, 0.1);
  Tensor y64 = F::conv2d(x.to(DType::kFloat64), w.to(DType::kFloat64), Tensor(), 1, 1);
  Tensor ybf;
  {
    ConvPrecisionGuard guard(ops::Precision::kBFloat16);
    ybf = F::conv2d(x, w, Tensor(), 1, 1).contiguous();
  }
  Tensor y32 = F::conv2d(x, w, Tensor(), 1, 1).contiguous();
  auto [d32, s32] = rs_max_diff(y32, y64);
  EXPECT_LT(d32, 1e-5 * s32) << "float32 conv after a bf16 one is not float32";
  auto [dbf, sbf] = rs_max_diff(ybf, y64);
  EXPECT_LT(dbf, 2e-2 * sbf);
  EXPECT_GT(dbf, 1e-5 * sbf) << "bf16 conv is float32-exact";
}

// The bf16 policy (src/ops/cpu/conv2d.cpp, conv_bf16): stride-1 convolutions whose input channels
// are a multiple of 16 compute in bfloat16; the RGB stem (C = 3), LeNet's small convolutions and
// strided convolutions stay float32 (oneDNN's bf16 kernels are slower for them), bit-identical
// to the float32 mode.
TEST(ResnetBf16, AppliesToFullChannelStrideOneConvolutionsOnly) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  struct Case {
    Shape x, w;
    int64_t stride, pad;
    bool bf16;
  };
  const std::vector<Case> cases = {{{2, 16, 8, 8}, {16, 16, 3, 3}, 1, 1, true},
                                   {{2, 32, 8, 8}, {64, 32, 3, 3}, 1, 1, true},
                                   {{2, 3, 8, 8}, {16, 3, 3, 3}, 1, 1, false},
                                   {{2, 3, 12, 12}, {6, 3, 5, 5}, 1, 0, false},
                                   {{2, 16, 8, 8}, {32, 16, 3, 3}, 2, 1, false}};
  uint64_t seed = 50;
  for (const auto& c : cases) {
    const std::string what = shape_str(c.x) + " * " + shape_str(c.w);
    Tensor x = rs_randn(c.x, seed++);
    Tensor w = rs_randn(c.w, seed++, 0.2);
    Tensor y32 = F::conv2d(x, w, Tensor(), c.stride, c.pad).contiguous();
    Tensor ybf;
    {
      ConvPrecisionGuard guard(ops::Precision::kBFloat16);
      ybf = F::conv2d(x, w, Tensor(), c.stride, c.pad).contiguous();
    }
    auto [d, m] = rs_max_diff(ybf, y32);
    if (c.bf16) {
      EXPECT_LT(d, 2e-2 * m) << what;
      EXPECT_GT(d, 0.0) << what << ": identical to fp32, so bf16 did not run";
    } else {
      EXPECT_EQ(d, 0.0) << what << ": should stay float32";
    }
  }
}

// ResNet stages chain same-shaped convolutions, the second reading the first's output (which the
// CPU kernels may keep in a blocked layout): both must match float64.
TEST(ResnetConv, ChainedConvolutionsMatchFloat64) {
  for (int64_t ch : {16, 32}) {
    Tensor x = rs_randn({2, ch, 8, 8}, 46);
    Tensor w1 = rs_randn({ch, ch, 3, 3}, 47, 0.1), w2 = rs_randn({ch, ch, 3, 3}, 48, 0.1);
    Tensor b = rs_randn({ch}, 49, 0.1);
    Tensor y1 = F::conv2d(x, w1, b, 1, 1);
    Tensor y2 = F::conv2d(F::relu(y1), w2, b, 1, 1);
    Tensor y3 = F::conv2d(y2, w2, b, 1, 1);
    Tensor x64 = x.to(DType::kFloat64), w164 = w1.to(DType::kFloat64),
           w264 = w2.to(DType::kFloat64), b64 = b.to(DType::kFloat64);
    Tensor r1 = F::conv2d(x64, w164, b64, 1, 1);
    Tensor r2 = F::conv2d(F::relu(r1), w264, b64, 1, 1);
    Tensor r3 = F::conv2d(r2, w264, b64, 1, 1);
    for (auto [what, a, r] : {std::tuple<const char*, Tensor, Tensor>{"first", y1, r1},
                              {"second", y2, r2},
                              {"third", y3, r3}}) {
      auto [d, m] = rs_max_diff(a.contiguous(), r);
      EXPECT_LT(d, 1e-4 * (1 + m)) << ch << " channels, " << what << " conv";
    }
  }
}

// ---- `hpcnet train` end to end -----------------------------------------------------------------

namespace {

// 5 x 16 training images (16 held out as val: 4 steps of 16 per epoch) and 16 test images, and
// the uninterrupted 2-epoch run, made once per process.
struct RsShared {
  TempDir tmp{"resnet_shared"};
  fs::path dir = tmp.path();
  RsShared() { write_tiny_cifar10(dir / "cifar", 16, 16); }
  fs::path cifar() const { return dir / "cifar"; }
  const RunResult& straight() {
    if (straight_.rc < 0) straight_ = run_hpcnet(args(dir / "straight", 2), dir);
    return straight_;
  }
  fs::path straight_dir() {
    straight();
    return dir / "straight";
  }
  std::vector<std::string> args(const fs::path& out, int epochs) const {
    return {"train",          "--model",        "resnet20",
            "--data",         cifar().string(), "--out",
            out.string(),     "--epochs",       std::to_string(epochs),
            "--batch-size",   "16",             "--optimizer",
            "adamw",          "--lr",           "1e-3",
            "--weight-decay", "0.05",           "--ema-decay",
            "0.9",            "--clip-grad-norm", "1",
            "--cutout",       "8",              "--augment",
            "--val-split",    "16",             "--workers",
            "0",              "--threads",      "1",
            "--seed",         "0",              "--log-every",
            "1000"};
  }

 private:
  RunResult straight_;
};

RsShared& rs_shared() {
  static RsShared s;
  return s;
}

class ResnetCli : public ::testing::Test {
 protected:
  TempDir tmp_{"resnet_t"};
  fs::path dir_ = tmp_.path();
};

}  // namespace

TEST_F(ResnetCli, AdamWEmaClipCutoutRunWritesTheirState) {
  const RunResult& r = rs_shared().straight();
  ASSERT_EQ(r.rc, 0) << r.out << "\n" << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  const fs::path d = rs_shared().straight_dir();

  int epochs = 0;
  for (const auto& l : split_lines(read_file(d / "metrics.jsonl"))) {
    auto j = nlohmann::json::parse(l);
    if (j.at("event") == "start") {
      EXPECT_EQ(j.at("train_images"), 64);
      EXPECT_EQ(j.at("val_images"), 16);
      EXPECT_EQ(j.at("config").at("optimizer"), "adamw") << l;
    }
    if (j.at("event") != "epoch") continue;
    ++epochs;
    EXPECT_EQ(j.at("steps"), 4) << l;
    ASSERT_TRUE(j.contains("val_accuracy")) << l;
    double acc = j.at("val_accuracy");
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 100.0);
    EXPECT_TRUE(std::isfinite(j.at("train_loss").get<double>())) << l;
  }
  EXPECT_EQ(epochs, 2);

  SafetensorsFile ck = load_safetensors((d / "checkpoint.safetensors").string());
  SafetensorsFile model = load_safetensors((d / "model.safetensors").string());
  int n_model = 0, n_ema = 0, n_avg = 0, n_avg_sq = 0, n_momentum = 0;
  for (const auto& n : ck.order) {
    n_model += n.rfind("model.", 0) == 0;
    n_ema += n.rfind("ema.", 0) == 0;
    n_avg += n.rfind("optim.exp_avg.", 0) == 0;
    n_avg_sq += n.rfind("optim.exp_avg_sq.", 0) == 0;
    n_momentum += n.rfind("optim.momentum_buffer.", 0) == 0;
  }
  auto m = nn::make_model("resnet20");
  const int n_state = static_cast<int>(m->state_dict().size());
  const int n_params = static_cast<int>(m->named_parameters().size());
  EXPECT_EQ(n_model, n_state);
  EXPECT_EQ(n_ema, n_state);
  EXPECT_EQ(n_avg, n_params);
  EXPECT_EQ(n_avg_sq, n_params);
  EXPECT_EQ(n_momentum, 0);
  EXPECT_TRUE(ck.contains("ema.conv1.weight"));
  EXPECT_TRUE(ck.contains("optim.exp_avg.conv1.weight"));
  // The model file holds the averaged weights (the EMA), which differ from the trained ones.
  ASSERT_EQ(static_cast<int>(model.order.size()), n_state);
  bool any_diff = false;
  for (const auto& n : model.order) {
    ASSERT_TRUE(ck.contains("ema." + n)) << n;
    EXPECT_TRUE(same_bytes(model.at(n), ck.at("ema." + n))) << n;
    any_diff |= !same_bytes(ck.at("model." + n), ck.at("ema." + n));
  }
  EXPECT_TRUE(any_diff) << "EMA equals the trained weights: no averaging happened";
}

TEST_F(ResnetCli, ResumeWithAdamWAndEmaIsBitExact) {
  const fs::path straight = rs_shared().straight_dir();
  ASSERT_EQ(rs_shared().straight().rc, 0) << rs_shared().straight().err;
  const fs::path resumed = dir_ / "resumed";
  RunResult first = run_hpcnet(rs_shared().args(resumed, 1), dir_);
  ASSERT_EQ(first.rc, 0) << first.err;
  ASSERT_TRUE(fs::exists(resumed / "checkpoint.safetensors"));
  auto args = rs_shared().args(resumed, 2);
  args.insert(args.end(), {"--resume", resumed.string()});
  RunResult second = run_hpcnet(args, dir_);
  ASSERT_EQ(second.rc, 0) << second.err;

  EXPECT_EQ(read_file(straight / "model.safetensors"), read_file(resumed / "model.safetensors"))
      << "model.safetensors differs from the uninterrupted run";
  expect_same_tensors(straight / "checkpoint.safetensors", resumed / "checkpoint.safetensors");
}

TEST_F(ResnetCli, BadValuesOfTheNewFlagsExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--optimizer", "adam"}, "--optimizer"},
      {{"--precision", "fp16"}, "--precision"},
      {{"--ema-decay", "1.5"}, "--ema-decay"},
      {{"--cutout", "-1"}, "--cutout"}};
  for (const auto& [extra, flag] : cases) {
    const fs::path out = dir_ / ("run" + flag);
    std::vector<std::string> args = {"train",   "--model",    "resnet20",
                                     "--data",  rs_shared().cifar().string(),
                                     "--out",   out.string(), "--epochs",
                                     "1",       "--threads",  "1",
                                     "--workers", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run_hpcnet(args, dir_);
    const std::string what = extra[0] + " " + extra[1];
    expect_refused(r, what, {flag});
    EXPECT_FALSE(fs::exists(out)) << what << ": a run directory was written";
  }
}
