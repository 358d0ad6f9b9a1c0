// The float32 CPU kernels (oneDNN and vectorised loops) against the float64 reference loops on
// the same inputs, forward and backward; outputs are pre-filled with NaN to prove every kernel
// overwrites its output. Tolerance: |f32 - f64| <= 1e-4 * (1 + |f64|).
#include <gtest/gtest.h>

#include <cmath>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/conv2d/cpu_direct.h"
#include "src/ops/max_pool2d/math.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"

using namespace hpcnet;

namespace {

Tensor randn(const Shape& s, Rng& rng) {
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal();
  return t;
}

// Outputs pre-filled with NaN (an element a kernel never writes fails the comparison); a float32
// result within 1e-4 (1 + |float64 reference|) elementwise: the op checks' helpers.
using ops::case_checks::nan_cpu;
void expect_close(const Tensor& f32, const Tensor& f64, const std::string& what) {
  ops::case_checks::expect_near_all(f32, f64, 1e-4, 1e-4, what);
}

struct ConvCase {
  Shape x, w;
  ops::Conv2dParams p;
  bool bias;
  ops::Act act;  // fused into the forward
};
using A = ops::Act;

Shape conv_out_shape(const ConvCase& c) {
  return {c.x[0], c.w[0], ops::conv_out_size(c.x[2], c.w[2], c.p.stride_h, c.p.pad_h, c.p.dil_h),
          ops::conv_out_size(c.x[3], c.w[3], c.p.stride_w, c.p.pad_w, c.p.dil_w)};
}

// The forward (with the case's fused activation) and both backward kernels of case c in dtype t:
// {y, dx, dw, db} (db undefined without a bias), each pre-filled with NaN.
std::vector<Tensor> run_conv(const ConvCase& c, DType t, const Tensor& x, const Tensor& w,
                             const Tensor& b, const Tensor& dy) {
  Tensor xt = x.to(t), wt = w.to(t), bt = c.bias ? b.to(t) : Tensor(), dyt = dy.to(t);
  std::vector<Tensor> out = {nan_cpu(conv_out_shape(c), t), nan_cpu(c.x, t), nan_cpu(c.w, t),
                             c.bias ? nan_cpu({c.w[0]}, t) : Tensor()};
  ops::conv2d_forward(xt, wt, bt, out[0], c.p, c.act);
  ops::conv2d_backward_data(dyt, wt, out[1], c.p);
  ops::conv2d_backward_weights(xt, dyt, out[2], out[3], c.p);
  return out;
}
const char* const kConvOutputNames[] = {" y", " dx", " dw", " db"};

}  // namespace

// Both float32 paths (oneDNN, and the direct kernels where they apply) against float64.
class OpsCpuConv : public ::testing::TestWithParam<cpu::ConvAlgo> {
 protected:
  void SetUp() override { cpu::set_conv_algo(GetParam()); }
  void TearDown() override { cpu::set_conv_algo(cpu::ConvAlgo::kAuto); }
};

TEST_P(OpsCpuConv, Float32MatchesFloat64Reference) {
  std::vector<ConvCase> cases = {
      {{4, 3, 32, 32}, {6, 3, 5, 5}, {1, 1, 0, 0}, true, A::kRelu},
      {{4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1, 0, 0}, true, A::kNone},
      {{2, 5, 9, 9}, {7, 5, 3, 3}, {2, 2, 1, 1}, false, A::kNone},
      {{3, 4, 8, 8}, {8, 4, 3, 3}, {1, 1, 1, 1}, true, A::kRelu},
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kRelu},
      {{2, 3, 11, 6}, {17, 3, 7, 7}, {1, 1, 3, 3}, true, A::kNone},
      {{1, 16, 20, 33}, {12, 16, 5, 5}, {1, 1, 2, 2}, true, A::kNone},
      {{2, 4, 8, 8}, {32, 4, 3, 3}, {1, 1, 1, 1}, true, A::kRelu},  // channel-vectorised kernels
      // SiLU: oneDNN's swish post-op, and after the direct kernels
      {{2, 16, 9, 9}, {32, 16, 3, 3}, {2, 2, 1, 1}, true, A::kSilu},
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kSilu},
      {{2, 4, 8, 8}, {32, 4, 3, 3}, {1, 1, 1, 1}, true, A::kSilu},
  };
  Rng rng(1);
  for (auto& c : cases) {
    if (GetParam() == cpu::ConvAlgo::kDirect && !cpu::conv2d_direct_applies(c.x, c.w, c.p))
      continue;
    Tensor x = randn(c.x, rng), w = randn(c.w, rng), b = c.bias ? randn({c.w[0]}, rng) : Tensor();
    Tensor dy = randn(conv_out_shape(c), rng);
    const auto got = run_conv(c, DType::kFloat32, x, w, b, dy);
    const auto ref = run_conv(c, DType::kFloat64, x, w, b, dy);
    std::string tag = "conv " + shape_str(c.x) + " " + shape_str(c.w);
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].defined()) expect_close(got[i], ref[i], tag + kConvOutputNames[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, OpsCpuConv,
                         ::testing::Values(cpu::ConvAlgo::kOneDnn, cpu::ConvAlgo::kDirect),
                         [](const auto& info) {
                           return info.param == cpu::ConvAlgo::kOneDnn ? std::string("OneDnn")
                                                                       : std::string("Direct");
                         });

// F::conv2d_silu: one fused kernel without autograd (blocked oneDNN output, plain oneDNN output,
// direct kernels), the same numbers as silu(conv2d) to float32 rounding; with a gradient needed
// it is the two ops, and its gradients are theirs.
TEST(OpsCpu, ConvSiluFusedEqualsSiluOfConv) {
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  const std::vector<Case> cases = {{{2, 16, 10, 10}, {32, 16, 3, 3}, 2, 1},  // blocked output
                                   {{2, 8, 9, 9}, {12, 8, 1, 1}, 1, 0},      // plain output
                                   {{2, 3, 12, 12}, {8, 3, 3, 3}, 1, 1}};    // direct kernels
  Rng rng(5);
  for (const auto& c : cases) {
    const std::string tag = shape_str(c.x) + " * " + shape_str(c.w);
    Tensor x = randn(c.x, rng).to(DType::kFloat32), w = randn(c.w, rng).to(DType::kFloat32);
    Tensor b = randn({c.w[0]}, rng).to(DType::kFloat32);
    Tensor fused, want;
    {
      NoGradGuard ng;
      fused = F::conv2d_silu(x, w, b, c.stride, c.pad).contiguous();
      want = F::silu(F::conv2d(x, w, b, c.stride, c.pad)).contiguous();
    }
    ASSERT_EQ(fused.shape(), want.shape()) << tag;
    auto f = fused.to_vector_f64(), g = want.to_vector_f64();
    for (size_t i = 0; i < f.size(); ++i)
      ASSERT_NEAR(f[i], g[i], 1e-5 * (1 + std::abs(g[i]))) << tag << " element " << i;
    // Under autograd: silu's node on top, and the input gradient of silu(conv2d).
    Tensor xg = x.detach();
    xg.set_requires_grad(true);
    Tensor y = F::conv2d_silu(xg, w, b, c.stride, c.pad);
    ASSERT_NE(y.grad_fn(), nullptr) << tag;
    EXPECT_STREQ(y.grad_fn()->name(), "SiluBackward") << tag;
    F::sum(y).backward();
    Tensor xr = x.detach();
    xr.set_requires_grad(true);
    F::sum(F::silu(F::conv2d(xr, w, b, c.stride, c.pad))).backward();
    auto ga = xg.grad().to_vector_f64(), gb = xr.grad().to_vector_f64();
    for (size_t i = 0; i < ga.size(); ++i) ASSERT_EQ(ga[i], gb[i]) << tag << " dx " << i;
  }
}

TEST(OpsCpu, DirectConvAppliesToLenetShapes) {
  EXPECT_TRUE(cpu::conv2d_direct_applies({4, 3, 32, 32}, {6, 3, 5, 5}, {1, 1, 0, 0}));
  EXPECT_TRUE(cpu::conv2d_direct_applies({4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1, 0, 0}));
  EXPECT_FALSE(cpu::conv2d_direct_applies({4, 6, 14, 14}, {16, 6, 5, 5}, {2, 2, 0, 0}));
}

TEST(OpsCpu, MaxPool2dFloat32MatchesFloat64Reference) {
  struct PoolCase {
    Shape x;
    ops::Pool2dParams p;
  };
  std::vector<PoolCase> cases = {{{4, 6, 28, 28}, {2, 2, 2, 2, 0, 0}},
                                 {{2, 3, 7, 7}, {3, 3, 2, 2, 1, 1}}};
  Rng rng(2);
  for (auto& c : cases) {
    Tensor x = randn(c.x, rng);
    Shape ys = {c.x[0], c.x[1], ops::conv_out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h),
                ops::conv_out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w)};
    Tensor dy = randn(ys, rng);
    auto run = [&](DType t, Tensor& y, Tensor& dx) {
      y = nan_cpu(ys, t);
      dx = nan_cpu(c.x, t);
      Tensor ws;
      ops::max_pool2d_forward(x.to(t), y, &ws, c.p);
      ops::max_pool2d_backward(dy.to(t), ws, dx, c.p);
    };
    Tensor y32, dx32, y64, dx64;
    run(DType::kFloat32, y32, dx32);
    run(DType::kFloat64, y64, dx64);
    expect_close(y32, y64, "pool y");
    expect_close(dx32, dx64, "pool dx");
  }
}

// Stride-1 pooling without positions (inference; YOLO's SPPF) runs separably: row maxima, then
// column maxima. It must give what the window scan that records positions gives, value for value
// (ties and NaN included), in both dtypes, at the borders, with unequal windows and paddings,
// and with several threads. Pooling with positions at strides 1 and 2 goes tap by tap over rows
// of outputs, and must give the scan's values and positions. A NaN in a window is its maximum on
// every path, as in torch (the 2x2 path included, whose recorded position is then the NaN's).
TEST(OpsCpu, MaxPool2dStrideOneWithoutPositionsIsTheWindowScan) {
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  struct PoolCase {
    Shape x;
    ops::Pool2dParams p;
  };
  const std::vector<PoolCase> cases = {
      {{1, 128, 20, 20}, {5, 5, 1, 1, 2, 2}},  // SPPF at 640 px: enough work for threads
      {{2, 3, 7, 9}, {3, 3, 1, 1, 1, 1}},     {{1, 2, 6, 5}, {5, 5, 1, 1, 0, 0}},
      {{1, 2, 5, 8}, {4, 2, 1, 1, 2, 1}},     {{1, 1, 3, 3}, {5, 5, 1, 1, 2, 2}},
      {{1, 1, 1, 6}, {1, 3, 1, 1, 0, 1}},
  };
  Rng rng(4);
  for (const auto& c : cases)
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      // small integers: many ties; a few NaNs
      std::vector<double> v(static_cast<size_t>(shape_numel(c.x)));
      for (double& e : v) e = rng.uniform() < 0.02 ? NAN : std::floor(4 * rng.uniform());
      Tensor x = Tensor::from_vector_f64(v, c.x).to(t);
      Shape ys = {c.x[0], c.x[1], ops::conv_out_size(c.x[2], c.p.kernel_h, 1, c.p.pad_h),
                  ops::conv_out_size(c.x[3], c.p.kernel_w, 1, c.p.pad_w)};
      Tensor scan = nan_cpu(ys, t), fast = Tensor::full(ys, 7.0, t), ws;
      ops::max_pool2d_forward(x, scan, &ws, c.p);
      ops::max_pool2d_forward(x, fast, nullptr, c.p);
      const auto a = scan.to_vector_f64(), b = fast.to_vector_f64();
      const std::string tag = shape_str(c.x) + " k " + std::to_string(c.p.kernel_h) + "x" +
                              std::to_string(c.p.kernel_w) + " " + dtype_name(t);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(same(a[i], b[i]))
            << tag << " output " << i << ": scan " << a[i] << ", separable " << b[i];
    }
  // Windows with positions (training) at strides 1 and 2 run tap by tap over rows of outputs:
  // values and positions as the scan of math::pool_window_max, output by output.
  const std::vector<PoolCase> strided = {
      {{2, 64, 16, 16}, {3, 3, 2, 2, 1, 1}},  // ResNet's stem pool
      {{1, 3, 9, 8}, {3, 3, 2, 2, 1, 1}},    {{1, 2, 7, 7}, {3, 2, 2, 2, 0, 1}},
      {{1, 2, 6, 9}, {5, 5, 1, 1, 2, 2}},    {{1, 2, 5, 5}, {4, 4, 2, 2, 2, 2}},
      {{1, 1, 2, 3}, {3, 3, 2, 2, 1, 1}},
  };
  for (const auto& c : strided)
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      std::vector<double> v(static_cast<size_t>(shape_numel(c.x)));
      for (double& e : v) e = rng.uniform() < 0.02 ? NAN : std::floor(4 * rng.uniform());
      Tensor x = Tensor::from_vector_f64(v, c.x).to(t);
      const int64_t H = c.x[2], W = c.x[3];
      const int64_t P = ops::conv_out_size(H, c.p.kernel_h, c.p.stride_h, c.p.pad_h);
      const int64_t Q = ops::conv_out_size(W, c.p.kernel_w, c.p.stride_w, c.p.pad_w);
      Tensor y = nan_cpu({c.x[0], c.x[1], P, Q}, t), ws;
      ops::max_pool2d_forward(x, y, &ws, c.p);
      const math::PoolGeom g{
          H, W, c.p.kernel_h, c.p.kernel_w, c.p.stride_h, c.p.stride_w, c.p.pad_h, c.p.pad_w};
      const auto got = y.to_vector_f64();
      const int32_t* pos = ws.data<int32_t>();
      const std::string tag = shape_str(c.x) + " k " + std::to_string(c.p.kernel_h) + "x" +
                              std::to_string(c.p.kernel_w) + " s " + std::to_string(c.p.stride_h) +
                              " " + dtype_name(t);
      for (int64_t pl = 0; pl < c.x[0] * c.x[1]; ++pl)
        for (int64_t oh = 0; oh < P; ++oh)
          for (int64_t ow = 0; ow < Q; ++ow) {
            double best;
            int64_t at;
            math::pool_window_max(v.data() + pl * H * W, g, oh, ow, best, at);
            const size_t i = static_cast<size_t>((pl * P + oh) * Q + ow);
            ASSERT_TRUE(same(got[i], best))
                << tag << " output " << i << ": " << got[i] << ", scan " << best;
            ASSERT_EQ(pos[i], at) << tag << " position of output " << i;
          }
    }
  // NaN wins on the 2x2 path too, and its position is recorded: [[1, NaN], [3, 2]] -> NaN at 1.
  Tensor x = Tensor::from_vector({1, NAN, 3, 2, 5, 4, 6, NAN}, {1, 2, 2, 2});
  Tensor y = Tensor::empty({1, 2, 1, 1}), ws;
  ops::max_pool2d_forward(x, y, &ws, {2, 2, 2, 2, 0, 0});
  EXPECT_TRUE(std::isnan(y.to_vector()[0]) && std::isnan(y.to_vector()[1]));
  EXPECT_EQ(ws.data<int32_t>()[0], 1);
  EXPECT_EQ(ws.data<int32_t>()[1], 3);
}

TEST(OpsCpu, LinearFloat32MatchesFloat64Reference) {
  Rng rng(3);
  for (bool relu : {false, true}) {
    Tensor x = randn({4, 400}, rng), w = randn({120, 400}, rng), b = randn({120}, rng);
    Tensor dy = randn({4, 120}, rng);
    auto run = [&](DType t, Tensor& y, Tensor& dx, Tensor& dw, Tensor& db) {
      y = nan_cpu({4, 120}, t);
      dx = nan_cpu({4, 400}, t);
      dw = nan_cpu({120, 400}, t);
      db = nan_cpu({120}, t);
      ops::linear_forward(x.to(t), w.to(t), b.to(t), y, relu);
      ops::linear_backward_data(dy.to(t), w.to(t), dx);
      ops::linear_backward_weights(x.to(t), dy.to(t), dw, db);
    };
    Tensor y32, dx32, dw32, db32, y64, dx64, dw64, db64;
    run(DType::kFloat32, y32, dx32, dw32, db32);
    run(DType::kFloat64, y64, dx64, dw64, db64);
    expect_close(y32, y64, "linear y");
    expect_close(dx32, dx64, "linear dx");
    expect_close(dw32, dw64, "linear dw");
    expect_close(db32, db64, "linear db");
  }
}

TEST(OpsCpu, LossesAndElementwiseFloat32MatchFloat64) {
  Rng rng(4);
  Tensor x = randn({5, 10}, rng), dy = randn({5, 10}, rng);
  Tensor t = Tensor::from_labels({0, 9, 3, 3, 7});
  auto run = [&](DType ty) {
    std::vector<Tensor> out;
    Tensor ls = nan_cpu({5, 10}, ty), dls = nan_cpu({5, 10}, ty);
    ops::log_softmax_forward(x.to(ty), ls);
    ops::log_softmax_backward(dy.to(ty), ls, dls);
    Tensor loss = nan_cpu({}, ty), prob = nan_cpu({5, 10}, ty), dlog = nan_cpu({5, 10}, ty);
    ops::cross_entropy_forward(x.to(ty), t, 0.1, loss, prob);
    ops::cross_entropy_backward(Tensor::full({}, 1.0, ty), prob, t, 0.1, dlog);
    Tensor relu = nan_cpu({5, 10}, ty);
    ops::relu_forward(x.to(ty), relu);
    return std::vector<Tensor>{ls, dls, loss, prob, dlog, relu};
  };
  auto a = run(DType::kFloat32), b = run(DType::kFloat64);
  for (size_t i = 0; i < a.size(); ++i) expect_close(a[i], b[i], "output " + std::to_string(i));
}

TEST(OpsCpu, OutOfRangeLabelIsAnInputError) {
  Tensor x = Tensor::zeros({2, 10}), loss = Tensor::empty({}), prob = Tensor::empty({2, 10});
  Tensor t = Tensor::from_labels({1, 10});
  EXPECT_THROW(ops::cross_entropy_forward(x, t, 0.0, loss, prob), InputError);
}

TEST(OpsCpu, ArgmaxTakesTheFirstMaximum) {
  Tensor x = Tensor::from_vector({1, 3, 3, 0, -1, -2, -1, -5}, {2, 4});
  Tensor out = Tensor::empty({2}, DType::kInt64);
  ops::argmax(x, out);
  EXPECT_EQ(out.data<int64_t>()[0], 1);
  EXPECT_EQ(out.data<int64_t>()[1], 0);
}

TEST(OpsCpu, SgdMatchesTheTorchRule) {
  // Two steps by hand: lr 0.1, momentum 0.9, dampening 0.5, weight decay 0.01, nesterov off.
  std::vector<Tensor> p = {Tensor::from_vector({1.0f, -2.0f}, {2})};
  std::vector<Tensor> g = {Tensor::from_vector({0.5f, 0.25f}, {2})};
  std::vector<Tensor> b = {Tensor::empty({2})};
  ops::SgdParams h{0.1, 0.9, 0.5, 0.01, false, true};
  ops::sgd_step(p, g, b, h);
  // d = g + wd p = (0.51, 0.23); buf = d; p -= 0.1 d
  EXPECT_NEAR(p[0].to_vector()[0], 1.0 - 0.051, 1e-6);
  EXPECT_NEAR(p[0].to_vector()[1], -2.0 - 0.023, 1e-6);
  h.first_step = false;
  ops::sgd_step(p, g, b, h);
  double p0 = 0.949, d0 = 0.5 + 0.01 * p0, buf0 = 0.9 * 0.51 + 0.5 * d0;
  EXPECT_NEAR(p[0].to_vector()[0], p0 - 0.1 * buf0, 1e-6);
}

TEST(OpsCpu, AnIntegerTensorIsAnErrorNamingTheOpAndTheBackend) {
  Tensor x = Tensor::zeros({4}, DType::kInt64), y = Tensor::empty({4}, DType::kInt64);
  try {
    ops::relu_forward(x, y);
    FAIL() << "relu on int64 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU kernel for dtype int64 is not implemented"),
              std::string::npos)
        << e.what();
  }
  Tensor f = Tensor::zeros({4}), g = Tensor::empty({4});
  f.data<float>()[1] = 2.f;
  f.data<float>()[2] = -1.f;
  ops::relu_forward(f, g);  // float32 still dispatches
  EXPECT_EQ(g.data<float>()[1], 2.f);
  EXPECT_EQ(g.data<float>()[2], 0.f);
}

// --conv-algorithm: Winograd (where oneDNN has it: 3x3, stride 1, undilated, float32, AVX-512)
// and auto against the float64 loops, forward and both backward passes; shapes Winograd does
// not cover (stride 2, 1x1, dilated, a SiLU post-op) fall back to direct instead of failing. On
// an AVX-512 CPU the Winograd results must differ from direct's, which shows the setting reached
// oneDNN. Winograd's error scales with the output's largest values, not each element's (the
// transforms mix a tile's values), so the tolerance here is 1e-5 of the largest |f64| of each
// output (measured: about 2e-6 of it; direct's: 3e-7).
void expect_close_to_scale(const Tensor& f32, const Tensor& f64, const std::string& what) {
  auto a = f32.to_vector_f64(), b = f64.to_vector_f64();
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-5 * scale) << what << " element " << i;
}

TEST(OpsCpuConvAlgorithm, WinogradAndAutoMatchFloat64AndFallBackWhereTheyDoNotApply) {
  struct Reset {
    ~Reset() { ops::set_conv_algorithm(ops::ConvAlgorithm::kAuto); }
  } reset;
  ops::Conv2dParams dilated{1, 1, 2, 2};
  dilated.dil_h = dilated.dil_w = 2;
  std::vector<ConvCase> cases = {
      {{16, 64, 12, 12}, {64, 64, 3, 3}, {1, 1, 1, 1}, true, A::kRelu},
      {{16, 32, 10, 10}, {48, 32, 3, 3}, {1, 1, 1, 1}, false, A::kNone},
      {{16, 32, 10, 10}, {32, 32, 3, 3}, {1, 1, 1, 1}, true, A::kSilu},
      {{4, 16, 9, 9}, {32, 16, 3, 3}, {2, 2, 1, 1}, true, A::kNone},
      {{4, 32, 7, 7}, {16, 32, 1, 1}, {1, 1, 0, 0}, false, A::kNone},
      {{4, 16, 9, 9}, {16, 16, 3, 3}, dilated, false, A::kNone},
  };
  Rng rng(2);
  for (auto& c : cases) {
    Tensor x = randn(c.x, rng), w = randn(c.w, rng), b = c.bias ? randn({c.w[0]}, rng) : Tensor();
    Tensor dy = randn(conv_out_shape(c), rng);
    const auto ref = run_conv(c, DType::kFloat64, x, w, b, dy);
    std::vector<Tensor> direct;
    for (auto a :
         {ops::ConvAlgorithm::kDirect, ops::ConvAlgorithm::kWinograd, ops::ConvAlgorithm::kAuto}) {
      ops::set_conv_algorithm(a);
      const auto got = run_conv(c, DType::kFloat32, x, w, b, dy);
      const std::string tag = "algorithm " + std::to_string(static_cast<int>(a)) + " conv " +
                              shape_str(c.x) + " " + shape_str(c.w);
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i].defined()) expect_close_to_scale(got[i], ref[i], tag + kConvOutputNames[i]);
      if (a == ops::ConvAlgorithm::kDirect) direct = got;
      if (a == ops::ConvAlgorithm::kWinograd && &c == &cases[0] && ops::cpu_supports_bf16()) {
        for (size_t i = 0; i < 3; ++i)  // y, dx, dw: each of the three passes reached Winograd
          EXPECT_NE(got[i].to_vector_f64(), direct[i].to_vector_f64())
              << tag << kConvOutputNames[i] << ": not Winograd";
      }
    }
  }
}
