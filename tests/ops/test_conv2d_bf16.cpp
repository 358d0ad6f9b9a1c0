// Tests of bfloat16 convolutions (ops::set_conv_precision): forward and backward in bfloat16 within
// bfloat16's tolerance of float32, float32 again afterwards, the shapes it applies to (the others
// bit-identical to float32), and chained float32 convolutions against float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/conv2d/functional.h"
#include "src/ops/ops.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

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

// Sets the convolution precision for a scope and always restores float32.
class ConvPrecisionGuard {
 public:
  explicit ConvPrecisionGuard(ops::Precision p) { ops::set_conv_precision(p); }
  ~ConvPrecisionGuard() { ops::set_conv_precision(ops::Precision::kFloat32); }
  ConvPrecisionGuard(const ConvPrecisionGuard&) = delete;
  ConvPrecisionGuard& operator=(const ConvPrecisionGuard&) = delete;
};

}  // namespace

namespace hpcnet::test_util {
void conv2d_runs_in_bfloat16();
void conv2d_cuda_runs_in_bfloat16();
}  // namespace hpcnet::test_util

// ---- bfloat16 convolutions ---------------------------------------------------------------------

// Ops/conv2d.Bf16 (listed in conv2d's cases, src/ops/conv2d/test_cases.cpp).
void hpcnet::test_util::conv2d_runs_in_bfloat16() {
  if (!ops::cpu_supports_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  ASSERT_EQ(ops::conv_precision(), ops::Precision::kFloat32);
  Tensor x = normal_tensor({4, 16, 8, 8}, 40);
  Tensor w = normal_tensor({32, 16, 3, 3}, 41, 0.1);
  Tensor b = normal_tensor({32}, 42, 0.1);
  Tensor dy = normal_tensor({4, 32, 8, 8}, 43);
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
  if (!ops::cpu_supports_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  Tensor x = normal_tensor({2, 16, 6, 6}, 44);
  Tensor w = normal_tensor({16, 16, 3, 3}, 45, 0.1);
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
  if (!ops::cpu_supports_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
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
    Tensor x = normal_tensor(c.x, seed++);
    Tensor w = normal_tensor(c.w, seed++, 0.2);
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

// Inference (no graph recorded) widens bf16 to the strided convolutions with 32 or more input
// channels (multiples of 16), where oneDNN's AMX kernels are faster (conv_inference_bf16), also
// through ops::conv2d_into (predict's in-place concatenations); the same convolution recording
// a graph (training) stays float32, as do the stem (3 channels) and 16 channels at stride 2.
TEST(ResnetBf16, InferenceAlsoRunsStridedConvolutionsInBfloat16) {
  if (!ops::cpu_supports_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 convolutions)";
  struct Case {
    Shape x, w;
    bool bf16;
  };
  const std::vector<Case> cases = {{{2, 32, 8, 8}, {64, 32, 3, 3}, true},
                                   {{1, 64, 10, 10}, {16, 64, 3, 3}, true},
                                   {{2, 3, 8, 8}, {16, 3, 3, 3}, false},
                                   {{2, 16, 8, 8}, {32, 16, 3, 3}, false}};
  uint64_t seed = 70;
  for (const auto& c : cases) {
    const std::string what = shape_str(c.x) + " * " + shape_str(c.w);
    Tensor x = normal_tensor(c.x, seed++);
    Tensor w = normal_tensor(c.w, seed++, 0.2);
    Tensor b = normal_tensor({c.w[0]}, seed++, 0.1);
    const Tensor y32 = F::conv2d(x, w, b, 2, 1).contiguous();
    Tensor yinf, yinto, yrec;
    {
      ConvPrecisionGuard guard(ops::Precision::kBFloat16);
      yinf = F::conv2d(x, w, b, 2, 1).contiguous();
      Tensor out = Tensor::empty(y32.shape());
      ops::conv2d_into(x, w, b, ops::Conv2dParams{2, 2, 1, 1, 1, 1}, ops::Act::kNone, out);
      yinto = out.contiguous();
      Tensor xg = x.detach();
      xg.set_requires_grad(true);
      yrec = F::conv2d(xg, w, b, 2, 1).detach().contiguous();
    }
    EXPECT_EQ(yrec.to_vector(), y32.to_vector()) << what << ": a recorded conv left float32";
    EXPECT_EQ(yinto.to_vector(), yinf.to_vector()) << what << ": conv2d_into differs";
    auto [d, m] = rs_max_diff(yinf, y32);
    if (!c.bf16) {
      EXPECT_EQ(d, 0.0) << what << ": should stay float32";
      continue;
    }
    EXPECT_LT(d, 2e-2 * m) << what;
    EXPECT_GT(d, 0.0) << what << ": identical to fp32, so bf16 did not run";
    // A conv of the bf16-rounded input and weights in float32.
    Tensor xr = x.to(DType::kBFloat16).to(DType::kFloat32);
    Tensor wr = w.to(DType::kBFloat16).to(DType::kFloat32);
    auto [dr, sr] = rs_max_diff(yinf, F::conv2d(xr, wr, b, 2, 1).contiguous());
    EXPECT_LT(dr, 1e-5 * sr) << what << ": not a conv of bf16-rounded inputs";
  }
}

// ResNet stages chain same-shaped convolutions, the second reading the first's output (which the
// CPU kernels may keep in a blocked layout): both must match float64.
TEST(ResnetConv, ChainedConvolutionsMatchFloat64) {
  for (int64_t ch : {16, 32}) {
    Tensor x = normal_tensor({2, ch, 8, 8}, 46);
    Tensor w1 = normal_tensor({ch, ch, 3, 3}, 47, 0.1), w2 = normal_tensor({ch, ch, 3, 3}, 48, 0.1);
    Tensor b = normal_tensor({ch}, 49, 0.1);
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

// Ops/conv2d.CudaBf16 (listed in conv2d's cases): under --precision bf16 every float32 CUDA
// convolution runs cuDNN's bfloat16 kernels (x and dy converted by the node, w inside the
// kernel; float32 results). Forward (with the bias and with the fused ReLU), dx, dw and db within
// 1e-2 of float64 computed on the CPU, on the CPU's bf16 shape (stride 1, 16 channels) and on a
// stem the CPU keeps in float32 (3 channels, stride 2); the bf16 rounding is visible (not float32),
// the tensors stay float32 and the inputs are not rounded in place.
void hpcnet::test_util::conv2d_cuda_runs_in_bfloat16() {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  const Device gpu = cuda_device(0);
  // cuDNN's bfloat16 backward passes in NCHW may have no deterministic algorithm: any algorithm
  // here (hpcnet train's default), the library's deterministic default restored after.
  struct AnyAlgorithm {
    AnyAlgorithm() { ops::set_cuda_deterministic(false); }
    ~AnyAlgorithm() { ops::set_cuda_deterministic(true); }
  } any_algorithm;
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  for (const Case& k : {Case{{4, 16, 8, 8}, {32, 16, 3, 3}, 1, 1},
                        Case{{2, 3, 17, 17}, {16, 3, 3, 3}, 2, 1}}) {
    SCOPED_TRACE(shape_str(k.x) + " * " + shape_str(k.w));
    Tensor x = normal_tensor(k.x, 50), w = normal_tensor(k.w, 51, 0.1);
    Tensor b = normal_tensor({k.w[0]}, 52, 0.1);
    const int64_t p = ops::conv_out_size(k.x[2], k.w[2], k.stride, k.pad, 1);
    Tensor dy = normal_tensor({k.x[0], k.w[0], p, p}, 53);
    // float64 on the CPU: the reference.
    std::vector<Tensor> ref;
    {
      Tensor x64 = x.to(DType::kFloat64), w64 = w.to(DType::kFloat64), b64 = b.to(DType::kFloat64);
      for (Tensor* t : {&x64, &w64, &b64}) t->set_requires_grad(true);
      Tensor y = F::conv2d(x64, w64, b64, k.stride, k.pad);
      y.backward(dy.to(DType::kFloat64));
      ref = {y.detach(), x64.grad(), w64.grad(), b64.grad(),
             F::relu(F::conv2d(x64.detach(), w64.detach(), b64.detach(), k.stride, k.pad))};
    }
    std::vector<Tensor> got;
    {
      ConvPrecisionGuard guard(ops::Precision::kBFloat16);
      Tensor xg = x.to(gpu), wg = w.to(gpu), bg = b.to(gpu);
      for (Tensor* t : {&xg, &wg, &bg}) t->set_requires_grad(true);
      Tensor y = F::conv2d(xg, wg, bg, k.stride, k.pad);
      EXPECT_EQ(y.dtype(), DType::kFloat32);
      y.backward(dy.to(gpu));
      Tensor yr = F::conv2d_relu(xg.detach(), wg.detach(), bg.detach(), k.stride, k.pad);
      got = {y.detach().to(cpu_device()), xg.grad().to(cpu_device()), wg.grad().to(cpu_device()),
             bg.grad().to(cpu_device()), yr.to(cpu_device())};
      EXPECT_EQ(xg.detach().to(cpu_device()).to_vector(), x.to_vector()) << "x rounded in place";
      EXPECT_EQ(wg.detach().to(cpu_device()).to_vector(), w.to_vector()) << "w rounded in place";
    }
    const char* names[] = {"y", "dx", "dw", "db", "relu(y)"};
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << names[i];
      EXPECT_EQ(got[i].dtype(), DType::kFloat32) << names[i];
      auto [diff, scale] = rs_max_diff(got[i], ref[i]);
      EXPECT_LT(diff, 1e-2 * scale) << names[i] << ": CUDA bf16 too far from float64";
      if (i != 3)  // db sums dy, rounded to bf16, in double: it may land on float64's value
        EXPECT_GT(diff, 1e-6 * scale) << names[i] << ": float32-exact, so bf16 did not run";
    }
  }
}
