// The CUDA backend against the CPU backend, op by op (ggml's test-backend-ops idea): the same
// inputs through cpu:: and cuda:: kernels, forward and backward, outputs pre-filled with NaN to
// prove the CUDA kernels overwrite them; then autograd on the device, and the 10-step golden
// LeNet run (tests/golden/) on the GPU. Every GPU test skips itself, saying why, where
// cuda_available() is false (no GPU, no driver, or a build without -DHPCNET_CUDA=ON); the
// runtime tests at the top check exactly that case.
// Tolerances (absolute + relative to the CPU value):
//   float32, CUDA vs CPU: 1e-4 (1 + |cpu|)  (different summation orders; no TF32)
//   float64, CUDA vs CPU: 1e-10 (1 + |cpu|)
//   argmax, max-pool positions, int results: exact
//   golden LeNet on CUDA vs PyTorch: logits and loss 2e-5, gradients 1e-5, parameters after
//   10 SGD steps 1e-5, step losses 2e-5 (the CPU test's, loosened for cuDNN's orders).
#include <gtest/gtest.h>

#include "test_paths.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/max_pool2d/math.h"
#include "src/ops/op_record.h"
#include "tests/ops/op_tests.h"
#include "src/ops/ops.h"

using namespace hpcnet;

namespace {

#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason(); \
  } while (0)

const Device kGpu = cuda_device(0);

Tensor randn(const Shape& s, Rng& rng, DType t = DType::kFloat32) {
  Tensor x = Tensor::empty(s, DType::kFloat64);
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = rng.normal();
  return x.to(t);
}

Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : t; }
Tensor nan_gpu(const Shape& s, DType t) { return Tensor::full(s, NAN, t, kGpu); }
Tensor nan_cpu(const Shape& s, DType t) { return Tensor::full(s, NAN, t); }

double tol_for(DType t) { return t == DType::kFloat64 ? 1e-10 : 1e-4; }

// |cuda - cpu| <= tol (1 + |cpu|) elementwise, NaN nowhere.
void expect_close(const Tensor& on_gpu, const Tensor& on_cpu, double tol, const std::string& what) {
  ASSERT_TRUE(on_gpu.device().is_cuda()) << what;
  ASSERT_EQ(on_gpu.shape(), on_cpu.shape()) << what;
  auto a = on_gpu.to_vector_f64(), b = on_cpu.to_vector_f64();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << what << " element " << i << " is NaN (not overwritten?)";
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " element " << i;
  }
}

void expect_equal_ints(const Tensor& on_gpu, const Tensor& on_cpu, const std::string& what) {
  ASSERT_EQ(on_gpu.shape(), on_cpu.shape()) << what;
  auto a = on_gpu.to_vector_f64(), b = on_cpu.to_vector_f64();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << what << " element " << i;
}

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64};

// The ops of the op table (and the non-differentiable ones) that have a parity test below.
const std::set<std::string> kParityTested = {"conv2d",
                                             "max_pool2d",
                                             "linear",
                                             "relu",
                                             "add",
                                             "reshape",
                                             "log_softmax",
                                             "nll_loss",
                                             "cross_entropy",
                                             "sum",
                                             "mean",
                                             "argmax",
                                             "sgd_step",
                                             "batch_norm",
                                             "global_avg_pool2d",
                                             "subsample_pad",
                                             "dropout",
                                             "adamw_step",
                                             "upsample_nearest2d",
                                             "cat",
                                             "cross_entropy2d",
                                             "conv_transpose2d",
                                             "mul_scalar",
                                             "upsample_bilinear2d",
                                             "dice_loss",
                                             "silu",
                                             "gelu",
                                             "sigmoid",
                                             "mul",
                                             "narrow",
                                             "bce_with_logits",
                                             "gather_anchors",
                                             "dfl_expect",
                                             "ciou_loss",
                                             "dfl_loss",
                                             "softmax",
                                             "bmm",
                                             "depthwise_conv2d"};

}  // namespace

// ---- runtime: these run everywhere, GPU or not ----

TEST(CudaRuntime, AvailabilityIsAnAnswerNeverACrash) {
  bool avail = cuda_available();  // must not throw, whatever the machine
  EXPECT_EQ(avail, cuda_device_count() > 0);
  if (!avail) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_TRUE(cuda_built());
    EXPECT_NE(cuda_describe().find("cuda:0"), std::string::npos) << cuda_describe();
  }
  if (!cuda_built()) {
    EXPECT_FALSE(avail);
    EXPECT_NE(cuda_unavailable_reason().find("HPCNET_CUDA"), std::string::npos);
  }
}

TEST(CudaRuntime, WithoutADeviceCudaTensorsAreAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present; this checks its absence";
  try {
    Tensor t = Tensor::zeros({2, 2}, DType::kFloat32, kGpu);
    FAIL() << "a CUDA tensor was created without a usable device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
  // The CPU keeps working in the same process.
  Tensor c = Tensor::full({3}, 2.0);
  EXPECT_EQ(c.to_vector()[2], 2.0f);
  EXPECT_EQ(cuda_allocator_stats().bytes_in_use, 0u);
}

TEST(CudaParity, EveryOpInTheTableHasAParityTest) {
  for (const ops::OpRecord* op : op_record::kAll)
    EXPECT_TRUE(kParityTested.count(op->name))
        << "op '" << op->name << "' has no CUDA parity test in test_cuda.cpp";
}

// ---- tensors and memory on the device ----

TEST(CudaTensor, CopiesFillsAndMovesRoundTrip) {
  REQUIRE_CUDA();
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor g = a.to(kGpu);
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.to_vector(), a.to_vector());
  EXPECT_EQ(g.clone().to(cpu_device()).to_vector(), a.to_vector());
  // dtype conversion and item() on the device
  EXPECT_EQ(g.to(DType::kFloat64).to_vector_f64(), a.to_vector_f64());
  EXPECT_EQ(Tensor::full({}, 2.5, DType::kFloat32, kGpu).item(), 2.5);
  // fills: zeros, full, fill_ of every dtype
  EXPECT_EQ(Tensor::zeros({5}, DType::kFloat32, kGpu).to_vector(), std::vector<float>(5, 0.f));
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kFloat16, DType::kBFloat16}) {
    Tensor f = Tensor::empty({7}, t, kGpu);
    f.fill_(3.0);
    EXPECT_EQ(f.to_vector_f64(), std::vector<double>(7, 3.0)) << dtype_name(t);
  }
  // a strided (transposed) view on the device, copied both ways
  Tensor tv = g.detach();
  tv.impl()->shape = {3, 2};
  tv.impl()->strides = {1, 3};
  EXPECT_EQ(tv.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor back = Tensor::zeros({2, 3}, DType::kFloat32, kGpu);
  Tensor bv = back.detach();
  bv.impl()->shape = {3, 2};
  bv.impl()->strides = {1, 3};
  bv.copy_(Tensor::from_vector({1, 4, 2, 5, 3, 6}, {3, 2}));
  EXPECT_EQ(back.to_vector(), a.to_vector());
  // to_ moves a shared tensor in place, with its grad
  Tensor p = Tensor::from_vector({1, 2}, {2});
  p.set_grad(Tensor::from_vector({3, 4}, {2}));
  Tensor alias = p;
  p.to_(kGpu);
  EXPECT_TRUE(alias.device().is_cuda());
  EXPECT_TRUE(alias.grad().device().is_cuda());
  EXPECT_EQ(alias.grad().to_vector(), (std::vector<float>{3, 4}));
}

TEST(CudaAllocator, RepeatedShapesHitTheCache) {
  REQUIRE_CUDA();
  { Tensor warm = Tensor::empty({1000, 1000}, DType::kFloat32, kGpu); }
  AllocatorStats before = cuda_allocator_stats(0);
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1000, 1000}, DType::kFloat32, kGpu);
    EXPECT_GE(cuda_allocator_stats(0).bytes_in_use, 4000000u);
  }
  AllocatorStats after = cuda_allocator_stats(0);
  EXPECT_EQ(after.system_allocs, before.system_allocs);
  EXPECT_GE(after.cache_hits, before.cache_hits + 10);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

// ---- op parity, forward and backward ----

TEST(CudaParity, Conv2d) {
  REQUIRE_CUDA();
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
    ops::Act act;
  };
  using A = ops::Act;
  std::vector<Case> cases = {
      {{4, 3, 32, 32}, {6, 3, 5, 5}, {1, 1, 0, 0}, true, A::kRelu},  // LeNet conv1 (fused)
      {{4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1, 0, 0}, true, A::kNone},
      {{2, 5, 9, 9}, {7, 5, 3, 3}, {2, 2, 1, 1}, false, A::kNone},
      {{3, 4, 8, 8}, {8, 4, 3, 3}, {1, 1, 1, 1}, true, A::kRelu},
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kRelu},
      {{2, 3, 11, 6}, {17, 3, 7, 7}, {1, 1, 3, 3}, true, A::kNone},
      {{2, 8, 13, 12}, {16, 8, 3, 3}, {1, 1, 2, 2, 2, 2}, false, A::kRelu},  // dilated (DeepLab)
      {{1, 4, 17, 17}, {8, 4, 3, 3}, {2, 2, 3, 3, 3, 3}, true, A::kNone},   // dilated, strided
      {{2, 16, 9, 9}, {32, 16, 3, 3}, {2, 2, 1, 1}, true, A::kSilu},       // YOLO's folded Conv
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kSilu},
  };
  Rng rng(11);
  for (DType t : kFloatTypes)
    for (auto& c : cases) {
      Tensor x = randn(c.x, rng, t), w = randn(c.w, rng, t);
      Tensor b = c.bias ? randn({c.w[0]}, rng, t) : Tensor();
      Shape ys = {c.x[0], c.w[0],
                  ops::conv_out_size(c.x[2], c.w[2], c.p.stride_h, c.p.pad_h, c.p.dil_h),
                  ops::conv_out_size(c.x[3], c.w[3], c.p.stride_w, c.p.pad_w, c.p.dil_w)};
      Tensor dy = randn(ys, rng, t);
      std::string tag = std::string("conv2d ") + dtype_name(t) + " " + shape_str(c.x) + " " +
                        shape_str(c.w) + " act " + std::to_string(static_cast<int>(c.act));
      Tensor y = nan_cpu(ys, t), dx = nan_cpu(c.x, t), dw = nan_cpu(c.w, t);
      Tensor db = c.bias ? nan_cpu({c.w[0]}, t) : Tensor();
      ops::conv2d_forward(x, w, b, y, c.p, c.act);
      ops::conv2d_backward_data(dy, w, dx, c.p);
      ops::conv2d_backward_weights(x, dy, dw, db, c.p);
      Tensor gy = nan_gpu(ys, t), gdx = nan_gpu(c.x, t), gdw = nan_gpu(c.w, t);
      Tensor gdb = c.bias ? nan_gpu({c.w[0]}, t) : Tensor();
      ops::conv2d_forward(gpu(x), gpu(w), gpu(b), gy, c.p, c.act);
      ops::conv2d_backward_data(gpu(dy), gpu(w), gdx, c.p);
      ops::conv2d_backward_weights(gpu(x), gpu(dy), gdw, gdb, c.p);
      expect_close(gy, y, tol_for(t), tag + " y");
      expect_close(gdx, dx, tol_for(t), tag + " dx");
      expect_close(gdw, dw, tol_for(t), tag + " dw");
      if (c.bias) expect_close(gdb, db, tol_for(t), tag + " db");
    }
}

TEST(CudaParity, MaxPool2dWithTheCpuWorkspace) {
  REQUIRE_CUDA();
  struct Case {
    Shape x;
    ops::Pool2dParams p;
  };
  std::vector<Case> cases = {{{4, 6, 28, 28}, {2, 2, 2, 2, 0, 0}},
                             {{2, 3, 7, 7}, {3, 3, 2, 2, 1, 1}},
                             {{1, 2, 9, 8}, {3, 2, 1, 2, 1, 0}}};
  Rng rng(12);
  for (DType t : kFloatTypes)
    for (auto& c : cases) {
      Tensor x = randn(c.x, rng, t);
      // Ties: a plane of equal values, so "first maximum" is exercised.
      Tensor xc = x.contiguous();
      if (t == DType::kFloat32) std::fill(xc.data<float>(), xc.data<float>() + c.x[3] * 2, 0.5f);
      Shape ys = {c.x[0], c.x[1], ops::conv_out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h),
                  ops::conv_out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w)};
      Tensor dy = randn(ys, rng, t);
      std::string tag = std::string("max_pool2d ") + dtype_name(t) + " " + shape_str(c.x);
      Tensor y = nan_cpu(ys, t), dx = nan_cpu(c.x, t), ws;
      ops::max_pool2d_forward(xc, y, &ws, c.p);
      ops::max_pool2d_backward(dy, ws, dx, c.p);
      Tensor gy = nan_gpu(ys, t), gdx = nan_gpu(c.x, t), gws;
      ops::max_pool2d_forward(gpu(xc), gy, &gws, c.p);
      ops::max_pool2d_backward(gpu(dy), gws, gdx, c.p);
      expect_close(gy, y, 0, tag + " y");  // a maximum is exact
      expect_equal_ints(gws, ws, tag + " argmax positions");
      expect_close(gdx, dx, tol_for(t), tag + " dx");
      Tensor gy2 = nan_gpu(ys, t);  // without a workspace (inference)
      ops::max_pool2d_forward(gpu(xc), gy2, nullptr, c.p);
      expect_close(gy2, y, 0, tag + " y without workspace");
    }
}

TEST(CudaParity, Linear) {
  REQUIRE_CUDA();
  Rng rng(13);
  struct Case {
    int64_t n, in, out;
  };
  std::vector<Case> cases = {{4, 400, 120}, {4, 120, 84}, {4, 84, 10}, {512, 400, 120}, {3, 7, 5}};
  for (DType t : kFloatTypes)
    for (auto& c : cases)
      for (bool bias : {true, false})
        for (bool relu : {false, true}) {
          Tensor x = randn({c.n, c.in}, rng, t), w = randn({c.out, c.in}, rng, t);
          Tensor b = bias ? randn({c.out}, rng, t) : Tensor(), dy = randn({c.n, c.out}, rng, t);
          std::string tag = std::string("linear ") + dtype_name(t) + " (" + std::to_string(c.n) +
                            ", " + std::to_string(c.in) + ") -> " + std::to_string(c.out) +
                            (bias ? " bias" : "") + (relu ? " relu" : "");
          Tensor y = nan_cpu({c.n, c.out}, t), dx = nan_cpu({c.n, c.in}, t);
          Tensor dw = nan_cpu({c.out, c.in}, t), db = bias ? nan_cpu({c.out}, t) : Tensor();
          ops::linear_forward(x, w, b, y, relu);
          ops::linear_backward_data(dy, w, dx);
          ops::linear_backward_weights(x, dy, dw, db);
          Tensor gy = nan_gpu({c.n, c.out}, t), gdx = nan_gpu({c.n, c.in}, t);
          Tensor gdw = nan_gpu({c.out, c.in}, t), gdb = bias ? nan_gpu({c.out}, t) : Tensor();
          ops::linear_forward(gpu(x), gpu(w), gpu(b), gy, relu);
          ops::linear_backward_data(gpu(dy), gpu(w), gdx);
          ops::linear_backward_weights(gpu(x), gpu(dy), gdw, gdb);
          expect_close(gy, y, tol_for(t), tag + " y");
          expect_close(gdx, dx, tol_for(t), tag + " dx");
          expect_close(gdw, dw, tol_for(t), tag + " dw");
          if (bias) expect_close(gdb, db, tol_for(t), tag + " db");
        }
}

TEST(CudaParity, ElementwiseAndReductions) {
  REQUIRE_CUDA();
  Rng rng(14);
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300007}}) {
      std::string tag = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      Tensor x = randn({n}, rng, t), x2 = randn({n}, rng, t), dy = randn({n}, rng, t);
      // relu forward / backward
      Tensor y = nan_cpu({n}, t), gy = nan_gpu({n}, t);
      ops::relu_forward(x, y);
      ops::relu_forward(gpu(x), gy);
      expect_close(gy, y, 0, "relu " + tag);
      Tensor dx = nan_cpu({n}, t), gdx = nan_gpu({n}, t);
      ops::relu_backward(dy, y, dx);
      ops::relu_backward(gpu(dy), gy, gdx);
      expect_close(gdx, dx, 0, "relu_backward " + tag);
      // relu in place (x and y alias)
      Tensor inplace = gpu(x);
      ops::relu_forward(inplace, inplace);
      expect_close(inplace, y, 0, "relu in place " + tag);
      // add, add_inplace, scale
      Tensor s = nan_cpu({n}, t), gs = nan_gpu({n}, t);
      ops::add(x, x2, s);
      ops::add(gpu(x), gpu(x2), gs);
      expect_close(gs, s, 0, "add " + tag);
      Tensor acc = gpu(x);
      ops::add_inplace(acc, gpu(x2));
      expect_close(acc, s, 0, "add_inplace " + tag);
      Tensor sc = nan_cpu({n}, t), gsc = nan_gpu({n}, t);
      ops::scale(x, -0.37, sc);
      ops::scale(gpu(x), -0.37, gsc);
      expect_close(gsc, sc, 0, "scale " + tag);
      // sum, mean and their backward fill
      Tensor sm = nan_cpu({}, t), gsm = nan_gpu({}, t), mn = nan_cpu({}, t), gmn = nan_gpu({}, t);
      ops::sum_forward(x, sm);
      ops::sum_forward(gpu(x), gsm);
      ops::mean_forward(x, mn);
      ops::mean_forward(gpu(x), gmn);
      expect_close(gsm, sm, tol_for(t), "sum " + tag);
      expect_close(gmn, mn, tol_for(t), "mean " + tag);
      Tensor f = nan_cpu({n}, t), gf = nan_gpu({n}, t);
      ops::fill_like_backward(sm, 1.0 / static_cast<double>(n), f);
      ops::fill_like_backward(gpu(sm), 1.0 / static_cast<double>(n), gf);
      expect_close(gf, f, 0, "fill_like_backward " + tag);
    }
}

TEST(CudaParity, BatchNormTrainAndEvalWithResidualAndRelu) {
  REQUIRE_CUDA();
  Rng rng(21);
  for (DType t : kFloatTypes)
    for (bool training : {true, false}) {
      std::string tag = std::string(dtype_name(t)) + (training ? " train" : " eval");
      Shape s{4, 6, 5, 7};
      Tensor x = randn(s, rng, t), res = randn(s, rng, t), g = randn(s, rng, t);
      Tensor w = randn({6}, rng, t), b = randn({6}, rng, t);
      Tensor rm = randn({6}, rng, t), rv = Tensor::full({6}, 1.5, t);
      Tensor grm = gpu(rm), grv = gpu(rv);
      ops::BatchNormParams p{1e-5, 0.1, training, true};
      Tensor y = nan_cpu(s, t), sm = nan_cpu({6}, t), si = nan_cpu({6}, t);
      Tensor gy = nan_gpu(s, t), gsm = nan_gpu({6}, t), gsi = nan_gpu({6}, t);
      ops::batch_norm_forward(x, w, b, res, rm, rv, y, sm, si, p);
      ops::batch_norm_forward(gpu(x), gpu(w), gpu(b), gpu(res), grm, grv, gy, gsm, gsi, p);
      expect_close(gy, y, tol_for(t), "batch_norm y " + tag);
      expect_close(grm, rm, tol_for(t), "running_mean " + tag);
      expect_close(grv, rv, tol_for(t), "running_var " + tag);
      expect_close(gsi, si, tol_for(t), "save_invstd " + tag);
      Tensor dx = nan_cpu(s, t), dw = nan_cpu({6}, t), db = nan_cpu({6}, t);
      Tensor gdx = nan_gpu(s, t), gdw = nan_gpu({6}, t), gdb = nan_gpu({6}, t);
      ops::batch_norm_backward(g, x, w, sm, si, dx, dw, db, p);
      ops::batch_norm_backward(gpu(g), gpu(x), gpu(w), gsm, gsi, gdx, gdw, gdb, p);
      expect_close(gdx, dx, tol_for(t), "batch_norm dx " + tag);
      expect_close(gdw, dw, tol_for(t), "batch_norm dweight " + tag);
      expect_close(gdb, db, tol_for(t), "batch_norm dbias " + tag);
    }
}

// SyncBatchNorm (one rank, a rank sum that adds nothing) through autograd: the output, the
// gradients and the running statistics of CUDA tensors match the CPU's.
TEST(CudaParity, SyncBatchNormThroughAutograd) {
  REQUIRE_CUDA();
  Rng rng(23);
  for (DType t : kFloatTypes) {
    const std::string tag = dtype_name(t);
    Shape s{3, 5, 4, 6};
    Tensor x = randn(s, rng, t), res = randn(s, rng, t), g = randn(s, rng, t);
    Tensor w = randn({5}, rng, t), b = randn({5}, rng, t), rm = randn({5}, rng, t);
    Tensor rv = Tensor::full({5}, 1.5, t);
    int calls = 0;
    const F::RankSum sum = [&calls](double*, size_t) { ++calls; };
    auto run = [&](Device d, Tensor& mean, Tensor& var) {
      Tensor xd = x.to(d), wd = w.to(d), bd = b.to(d);
      for (Tensor* p : {&xd, &wd, &bd}) p->set_requires_grad(true);
      mean = rm.to(d);
      var = rv.to(d);
      Tensor y = F::sync_batch_norm_act(xd, wd, bd, mean, var, 0.1, 1e-5, res.to(d), true, sum);
      F::sum(F::mul(y, g.to(d))).backward();
      return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad()};
    };
    Tensor cm, cv, gm, gv;
    const std::vector<Tensor> c = run(Device{}, cm, cv);
    const std::vector<Tensor> gg = run(kGpu, gm, gv);
    EXPECT_EQ(calls, 6);
    const char* names[] = {"y", "dx", "dweight", "dbias"};
    for (size_t i = 0; i < c.size(); ++i)
      expect_close(gg[i], c[i], tol_for(t), std::string("sync_batch_norm ") + names[i] + " " + tag);
    expect_close(gm, cm, tol_for(t), "sync running_mean " + tag);
    expect_close(gv, cv, tol_for(t), "sync running_var " + tag);
  }
}

TEST(CudaParity, PoolingShortcutDropoutAndOptimizerExtras) {
  REQUIRE_CUDA();
  Rng rng(22);
  for (DType t : kFloatTypes) {
    std::string tag = dtype_name(t);
    Tensor x = randn({3, 4, 5, 7}, rng, t);
    Tensor y = nan_cpu({3, 4}, t), gy = nan_gpu({3, 4}, t);
    ops::global_avg_pool2d_forward(x, y);
    ops::global_avg_pool2d_forward(gpu(x), gy);
    expect_close(gy, y, tol_for(t), "global_avg_pool2d " + tag);
    Tensor dx = nan_cpu(x.shape(), t), gdx = nan_gpu(x.shape(), t);
    ops::global_avg_pool2d_backward(y, dx);
    ops::global_avg_pool2d_backward(gpu(y), gdx);
    expect_close(gdx, dx, tol_for(t), "global_avg_pool2d_backward " + tag);
    Tensor sp = nan_cpu({3, 8, 3, 4}, t), gsp = nan_gpu({3, 8, 3, 4}, t);
    ops::subsample_pad_forward(x, sp, 2, 2);
    ops::subsample_pad_forward(gpu(x), gsp, 2, 2);
    expect_close(gsp, sp, 0, "subsample_pad " + tag);
    Tensor sdx = nan_cpu(x.shape(), t), gsdx = nan_gpu(x.shape(), t);
    ops::subsample_pad_backward(sp, sdx, 2, 2);
    ops::subsample_pad_backward(gpu(sp), gsdx, 2, 2);
    expect_close(gsdx, sdx, 0, "subsample_pad_backward " + tag);
    Tensor mask = Tensor::empty(x.shape(), DType::kUInt8);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = rng.uniform() < 0.7;
    Tensor m = nan_cpu(x.shape(), t), gm = nan_gpu(x.shape(), t);
    ops::mask_scale(x, mask, 1 / 0.7, m);
    ops::mask_scale(gpu(x), gpu(mask), 1 / 0.7, gm);
    expect_close(gm, m, tol_for(t), "dropout mask_scale " + tag);
    // AdamW (two steps), sum of squares and lerp.
    std::vector<Tensor> ps{randn({5, 3}, rng, t)}, gs{randn({5, 3}, rng, t)};
    std::vector<Tensor> ms{Tensor::zeros({5, 3}, t)}, vs{Tensor::zeros({5, 3}, t)};
    std::vector<Tensor> gps{gpu(ps[0])}, ggs{gpu(gs[0])}, gms{gpu(ms[0])}, gvs{gpu(vs[0])};
    for (int64_t step = 1; step <= 2; ++step) {
      ops::AdamWParams h{1e-2, 0.9, 0.999, 1e-8, 0.05, step};
      ops::adamw_step(ps, gs, ms, vs, h);
      ops::adamw_step(gps, ggs, gms, gvs, h);
    }
    expect_close(gps[0], ps[0], tol_for(t), "adamw " + tag);
    Tensor ss = Tensor::empty({}, DType::kFloat64), gss = Tensor::empty({}, DType::kFloat64, kGpu);
    ops::sum_squares(x, ss);
    ops::sum_squares(gpu(x), gss);
    expect_close(gss, ss, 1e-10, "sum_squares " + tag);
    Tensor a = x.clone(), ga = gpu(x), b = randn(x.shape(), rng, t);
    ops::lerp_inplace(a, b, 0.25);
    ops::lerp_inplace(ga, gpu(b), 0.25);
    expect_close(ga, a, tol_for(t), "lerp " + tag);
  }
}

TEST(CudaParity, SoftmaxFamilyAndArgmax) {
  REQUIRE_CUDA();
  Rng rng(15);
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{513}}) {
      const int64_t c = 10;
      std::string tag = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      Tensor x = randn({n, c}, rng, t), dy = randn({n, c}, rng, t);
      std::vector<int64_t> labels(n);
      for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int64_t>(rng.randint(c));
      Tensor tgt = Tensor::from_labels(labels), gtgt = gpu(tgt);
      // log_softmax forward / backward
      Tensor ls = nan_cpu({n, c}, t), gls = nan_gpu({n, c}, t);
      ops::log_softmax_forward(x, ls);
      ops::log_softmax_forward(gpu(x), gls);
      expect_close(gls, ls, tol_for(t), "log_softmax " + tag);
      Tensor dls = nan_cpu({n, c}, t), gdls = nan_gpu({n, c}, t);
      ops::log_softmax_backward(dy, ls, dls);
      ops::log_softmax_backward(gpu(dy), gls, gdls);
      expect_close(gdls, dls, tol_for(t), "log_softmax_backward " + tag);
      // nll_loss forward / backward
      Tensor nl = nan_cpu({}, t), gnl = nan_gpu({}, t);
      ops::nll_loss_forward(ls, tgt, nl);
      ops::nll_loss_forward(gls, gtgt, gnl);
      expect_close(gnl, nl, tol_for(t), "nll_loss " + tag);
      Tensor dl = Tensor::full({}, 1.7, t);
      Tensor dnl = nan_cpu({n, c}, t), gdnl = nan_gpu({n, c}, t);
      ops::nll_loss_backward(dl, tgt, dnl);
      ops::nll_loss_backward(gpu(dl), gtgt, gdnl);
      expect_close(gdnl, dnl, 0, "nll_loss_backward " + tag);
      // cross_entropy with and without label smoothing
      for (double eps : {0.0, 0.1}) {
        std::string e = tag + " eps=" + std::to_string(eps);
        Tensor loss = nan_cpu({}, t), prob = nan_cpu({n, c}, t);
        Tensor gloss = nan_gpu({}, t), gprob = nan_gpu({n, c}, t);
        ops::cross_entropy_forward(x, tgt, eps, loss, prob);
        ops::cross_entropy_forward(gpu(x), gtgt, eps, gloss, gprob);
        expect_close(gloss, loss, tol_for(t), "cross_entropy " + e);
        expect_close(gprob, prob, tol_for(t), "cross_entropy prob " + e);
        Tensor d = nan_cpu({n, c}, t), gd = nan_gpu({n, c}, t);
        ops::cross_entropy_backward(dl, prob, tgt, eps, d);
        ops::cross_entropy_backward(gpu(dl), gprob, gtgt, eps, gd);
        expect_close(gd, d, tol_for(t), "cross_entropy_backward " + e);
      }
      // argmax, with ties
      Tensor xt = x.contiguous();
      if (t == DType::kFloat32) xt.data<float>()[1] = xt.data<float>()[0] = 9.f;
      Tensor am = Tensor::empty({n}, DType::kInt64),
             gam = Tensor::full({n}, -1, DType::kInt64, kGpu);
      ops::argmax(xt, am);
      ops::argmax(gpu(xt), gam);
      expect_equal_ints(gam, am, "argmax " + tag);
    }
}

TEST(CudaParity, OutOfRangeLabelIsADeferredInputError) {
  REQUIRE_CUDA();
  Tensor x = Tensor::zeros({2, 10}, DType::kFloat32, kGpu);
  Tensor loss = nan_gpu({}, DType::kFloat32), prob = nan_gpu({2, 10}, DType::kFloat32);
  Tensor t = gpu(Tensor::from_labels({1, 10}));
  ops::cross_entropy_forward(x, t, 0.0, loss, prob);  // queued: cannot throw yet
  EXPECT_THROW(cuda_synchronize(kGpu), InputError);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_NO_THROW(cuda_synchronize(kGpu));  // reported once
}

TEST(CudaParity, UpsampleNearest2d) {
  REQUIRE_CUDA();
  Rng rng(23);
  for (DType t : kFloatTypes)
    for (int64_t s : {int64_t{1}, int64_t{2}, int64_t{3}})
      for (const Shape& xs : {Shape{2, 3, 5, 7}, Shape{1, 16, 33, 20}}) {
        std::string tag = std::string("upsample_nearest2d ") + dtype_name(t) + " " + shape_str(xs) +
                          " scale " + std::to_string(s);
        Shape ys = {xs[0], xs[1], xs[2] * s, xs[3] * s};
        Tensor x = randn(xs, rng, t), dy = randn(ys, rng, t);
        Tensor y = nan_cpu(ys, t), gy = nan_gpu(ys, t);
        ops::upsample_nearest2d_forward(x, y, s);
        ops::upsample_nearest2d_forward(gpu(x), gy, s);
        expect_close(gy, y, 0, tag + " y");
        Tensor dx = nan_cpu(xs, t), gdx = nan_gpu(xs, t);
        ops::upsample_nearest2d_backward(dy, dx, s);
        ops::upsample_nearest2d_backward(gpu(dy), gdx, s);
        expect_close(gdx, dx, tol_for(t), tag + " dx");
      }
}

TEST(CudaParity, UpsampleBilinear2dBothAlignments) {
  REQUIRE_CUDA();
  Rng rng(27);
  struct Case {
    Shape x;
    int64_t oh, ow;
  };
  for (DType t : kFloatTypes)
    for (bool align : {false, true})
      for (const Case& c : {Case{{2, 3, 5, 7}, 11, 9}, Case{{1, 16, 16, 16}, 128, 128},
                            Case{{2, 2, 9, 8}, 4, 3}, Case{{2, 4, 1, 1}, 6, 5}}) {
        std::string tag = std::string("upsample_bilinear2d ") + dtype_name(t) + " " +
                          shape_str(c.x) + " -> " + std::to_string(c.oh) + "x" +
                          std::to_string(c.ow) + (align ? " align_corners" : "");
        Shape ys = {c.x[0], c.x[1], c.oh, c.ow};
        Tensor x = randn(c.x, rng, t), dy = randn(ys, rng, t);
        Tensor y = nan_cpu(ys, t), gy = nan_gpu(ys, t);
        ops::upsample_bilinear2d_forward(x, y, align);
        ops::upsample_bilinear2d_forward(gpu(x), gy, align);
        expect_close(gy, y, tol_for(t), tag + " y");
        Tensor dx = nan_cpu(c.x, t), gdx = nan_gpu(c.x, t);
        ops::upsample_bilinear2d_backward(dy, dx, align);
        ops::upsample_bilinear2d_backward(gpu(dy), gdx, align);
        expect_close(gdx, dx, tol_for(t), tag + " dx");
      }
}

TEST(CudaParity, DiceLossWithWeightsAndIgnoredPixels) {
  REQUIRE_CUDA();
  Rng rng(28);
  struct Case {
    Shape x;
    bool weighted;
    double smooth;
  };
  for (const Case& c : {Case{{2, 5, 7, 9}, false, 0.0}, Case{{2, 5, 7, 9}, true, 1.0},
                        Case{{2, 11, 64, 64}, true, 0.0}})
    for (DType t : kFloatTypes) {
      const int64_t n = c.x[0], cls = c.x[1], h = c.x[2], w = c.x[3];
      std::string tag = std::string("dice_loss ") + dtype_name(t) + " " + shape_str(c.x) +
                        (c.weighted ? " weighted" : "");
      Tensor x = randn(c.x, rng, t);
      std::vector<int64_t> labels(n * h * w);
      for (auto& l : labels)  // class 1 absent; about one pixel in five ignored
        l = rng.uniform() < 0.2 ? 255 : static_cast<int64_t>(rng.randint(cls));
      for (auto& l : labels)
        if (l == 1) l = 0;
      Tensor tgt = Tensor::from_labels(labels).view_nograd({n, h, w});
      Tensor wt;
      if (c.weighted) {
        wt = Tensor::empty({cls}, DType::kFloat64);
        for (int64_t j = 0; j < cls; ++j) wt.data<double>()[j] = 0.25 + rng.uniform();
        wt = wt.to(t);
      }
      Tensor loss = nan_cpu({}, t), prob = nan_cpu(c.x, t), cf = nan_cpu({2, cls}, DType::kFloat64);
      Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(c.x, t),
             gcf = nan_gpu({2, cls}, DType::kFloat64);
      ops::dice_loss_forward(x, tgt, wt, 255, c.smooth, 1e-7, loss, prob, cf);
      ops::dice_loss_forward(gpu(x), gpu(tgt), gpu(wt), 255, c.smooth, 1e-7, gloss, gprob, gcf);
      expect_close(gloss, loss, tol_for(t), tag + " loss");
      expect_close(gprob, prob, tol_for(t), tag + " prob");
      expect_close(gcf, cf, tol_for(t), tag + " coef");
      Tensor dl = Tensor::full({}, 1.3, t);
      Tensor d = nan_cpu(c.x, t), gd = nan_gpu(c.x, t);
      ops::dice_loss_backward(dl, prob, tgt, cf, 255, d);
      ops::dice_loss_backward(gpu(dl), gprob, gpu(tgt), gcf, 255, gd);
      expect_close(gd, d, tol_for(t), tag + " dlogits");
    }
}

// A DeepLab head step on the device through autograd: a dilated conv, a transposed conv with
// bias, bilinear resizing, x 0.5 and the Dice loss plus cross-entropy; the same on the CPU.
TEST(CudaParity, AutogradThroughDeepLabStyleOps) {
  REQUIRE_CUDA();
  Rng rng(29);
  Tensor x = randn({2, 3, 6, 6}, rng), w1 = randn({4, 3, 3, 3}, rng);
  Tensor wt = randn({4, 5, 2, 2}, rng), bt = randn({5}, rng);
  std::vector<int64_t> labels(2 * 16 * 16);
  for (auto& l : labels) l = rng.uniform() < 0.1 ? 255 : static_cast<int64_t>(rng.randint(5));
  Tensor tgt = Tensor::from_labels(labels).view_nograd({2, 16, 16});
  auto run = [&](Device d) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {x, w1, wt, bt}) {
      Tensor l = t.to(d);
      if (l.same(t)) l = t.clone();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor h = F::conv2d_relu(leaves[0], leaves[1], Tensor(), 1, 2, 2);  // (2, 4, 6, 6)
    h = F::conv_transpose2d(h, leaves[2], leaves[3], 2, 0, 0);           // (2, 5, 12, 12)
    Tensor logits = F::upsample_bilinear2d(h, 16, 16, false);            // (2, 5, 16, 16)
    Tensor loss = F::add(F::cross_entropy2d(logits, tgt.to(d), Tensor(), 255),
                         F::mul_scalar(F::dice_loss(logits, tgt.to(d)), 0.5));
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), logits.detach()};
    for (auto& l : leaves) out.push_back(l.grad());
    return out;
  };
  auto c = run(cpu_device()), g = run(kGpu);
  for (size_t i = 0; i < c.size(); ++i)
    expect_close(g[i], c[i], 1e-4, "autograd output " + std::to_string(i));
}

TEST(CudaParity, CatAlongEveryDim) {
  REQUIRE_CUDA();
  Rng rng(24);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64})
    for (int64_t dim = 0; dim < 4; ++dim) {
      std::string tag = std::string("cat ") + dtype_name(t) + " dim " + std::to_string(dim);
      std::vector<Tensor> xs, gxs;
      std::vector<int64_t> sizes;
      Shape ys = {3, 4, 5, 6};
      ys[dim] = 0;
      for (int64_t d : {2, 1, 3}) {
        Shape s = {3, 4, 5, 6};
        s[dim] = d;
        ys[dim] += d;
        sizes.push_back(d);
        xs.push_back(randn(s, rng, DType::kFloat64).to(t));
        gxs.push_back(gpu(xs.back()));
      }
      Tensor y = Tensor::full(ys, -7, t), gy = Tensor::full(ys, -7, t, kGpu);
      ops::cat_forward(xs, y, dim);
      ops::cat_forward(gxs, gy, dim);
      expect_equal_ints(gy, y, tag + " y");
      Tensor dy = randn(ys, rng, DType::kFloat64).to(t);
      std::vector<Tensor> dxs(3), gdxs(3);
      for (int i : {0, 2}) {  // the middle input needs no gradient
        dxs[i] = Tensor::full(xs[i].shape(), -7, t);
        gdxs[i] = Tensor::full(xs[i].shape(), -7, t, kGpu);
      }
      ops::cat_backward(dy, sizes, dxs, dim);
      ops::cat_backward(gpu(dy), sizes, gdxs, dim);
      EXPECT_FALSE(gdxs[1].defined()) << tag;
      for (int i : {0, 2}) expect_equal_ints(gdxs[i], dxs[i], tag + " dx" + std::to_string(i));
    }
}

TEST(CudaParity, CrossEntropy2dWeightsAndIgnoredPixels) {
  REQUIRE_CUDA();
  Rng rng(25);
  struct Case {
    Shape x;
    bool weighted;
    int64_t ignore_index;
  };
  // The large case runs several hundred blocks in the first pass.
  for (const Case& c : {Case{{2, 5, 7, 9}, false, 255}, Case{{2, 5, 7, 9}, true, 255},
                        Case{{3, 21, 33, 40}, true, -100}, Case{{2, 4, 256, 300}, true, 255},
                        Case{{1, 3, 4, 4}, false, 1}})
    for (DType t : kFloatTypes) {
      const int64_t n = c.x[0], cls = c.x[1], h = c.x[2], w = c.x[3];
      std::string tag = std::string("cross_entropy2d ") + dtype_name(t) + " " + shape_str(c.x) +
                        (c.weighted ? " weighted" : "") + " ignore " +
                        std::to_string(c.ignore_index);
      Tensor x = randn(c.x, rng, t);
      std::vector<int64_t> labels(n * h * w);
      for (auto& l : labels)  // about one pixel in five ignored
        l = rng.uniform() < 0.2 ? c.ignore_index : static_cast<int64_t>(rng.randint(cls));
      Tensor tgt = Tensor::from_labels(labels).view_nograd({n, h, w}), gtgt = gpu(tgt);
      Tensor wt;
      if (c.weighted) {
        wt = Tensor::empty({cls}, DType::kFloat64);
        for (int64_t j = 0; j < cls; ++j) wt.data<double>()[j] = 0.25 + rng.uniform();
        wt = wt.to(t);
      }
      Tensor loss = nan_cpu({}, t), prob = nan_cpu(c.x, t), tw = nan_cpu({}, DType::kFloat64);
      Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(c.x, t), gtw = nan_gpu({}, DType::kFloat64);
      ops::cross_entropy2d_forward(x, tgt, wt, c.ignore_index, loss, prob, tw);
      ops::cross_entropy2d_forward(gpu(x), gtgt, gpu(wt), c.ignore_index, gloss, gprob, gtw);
      expect_close(gloss, loss, tol_for(t), tag + " loss");
      expect_close(gprob, prob, tol_for(t), tag + " prob");
      expect_close(gtw, tw, 1e-12, tag + " total_weight");
      Tensor dl = Tensor::full({}, 1.7, t);
      Tensor d = nan_cpu(c.x, t), gd = nan_gpu(c.x, t);
      ops::cross_entropy2d_backward(dl, prob, tgt, wt, tw, c.ignore_index, d);
      ops::cross_entropy2d_backward(gpu(dl), gprob, gtgt, gpu(wt), gtw, c.ignore_index, gd);
      expect_close(gd, d, tol_for(t), tag + " dlogits");
    }
  // Every pixel ignored: NaN on both backends, as torch; the gradient is 0.
  for (DType t : kFloatTypes) {
    Tensor x = randn({2, 3, 2, 2}, rng, t);
    Tensor tgt = Tensor::full({2, 2, 2}, 255, DType::kInt64);
    Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(x.shape(), t),
           gtw = nan_gpu({}, DType::kFloat64);
    ops::cross_entropy2d_forward(gpu(x), gpu(tgt), Tensor(), 255, gloss, gprob, gtw);
    EXPECT_TRUE(std::isnan(gloss.item())) << dtype_name(t);
    EXPECT_EQ(gtw.item(), 0.0);
    Tensor gd = nan_gpu(x.shape(), t);
    ops::cross_entropy2d_backward(gpu(Tensor::full({}, 1.0, t)), gprob, gpu(tgt), Tensor(), gtw,
                                  255, gd);
    for (double v : gd.to_vector_f64()) ASSERT_EQ(v, 0.0) << dtype_name(t);
  }
}

TEST(CudaParity, CrossEntropy2dOutOfRangeLabelIsADeferredInputError) {
  REQUIRE_CUDA();
  Tensor x = Tensor::zeros({2, 4, 3, 3}, DType::kFloat32, kGpu);
  std::vector<int64_t> labels(18, 1);
  labels[13] = 4;  // image 1
  Tensor t = gpu(Tensor::from_labels(labels).view_nograd({2, 3, 3}));
  Tensor loss = nan_gpu({}, DType::kFloat32), prob = nan_gpu({2, 4, 3, 3}, DType::kFloat32);
  Tensor tw = nan_gpu({}, DType::kFloat64);
  ops::cross_entropy2d_forward(x, t, Tensor(), 255, loss, prob, tw);  // queued: cannot throw yet
  try {
    cuda_synchronize(kGpu);
    FAIL() << "no deferred error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("label 4 of sample 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_NO_THROW(cuda_synchronize(kGpu));  // reported once
}

// A U-Net decoder step on the device: conv, upsample, cat with a skip, conv, cross_entropy2d
// with weights and ignored pixels, through autograd; the same on the CPU.
TEST(CudaParity, AutogradThroughAUNetDecoderStep) {
  REQUIRE_CUDA();
  Rng rng(26);
  Tensor x = randn({2, 3, 4, 4}, rng), skip = randn({2, 2, 8, 8}, rng);
  Tensor w1 = randn({4, 3, 3, 3}, rng), w2 = randn({5, 6, 3, 3}, rng), b2 = randn({5}, rng);
  Tensor weight = Tensor::from_vector({1, 2, 0.5, 1, 3}, {5});
  std::vector<int64_t> labels(2 * 8 * 8);
  for (auto& l : labels) l = rng.uniform() < 0.1 ? 255 : static_cast<int64_t>(rng.randint(5));
  Tensor tgt = Tensor::from_labels(labels).view_nograd({2, 8, 8});
  auto run = [&](Device d) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {x, skip, w1, w2, b2}) {
      Tensor l = t.to(d);
      if (l.same(t)) l = t.clone();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor h = F::conv2d_relu(leaves[0], leaves[2], Tensor(), 1, 1);  // (2, 4, 4, 4)
    h = F::cat({F::upsample_nearest2d(h, 2), leaves[1]}, 1);          // (2, 6, 8, 8)
    Tensor logits = F::conv2d(h, leaves[3], leaves[4], 1, 1);         // (2, 5, 8, 8)
    Tensor loss = F::cross_entropy2d(logits, tgt.to(d), weight.to(d), 255);
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), logits.detach()};
    for (auto& l : leaves) out.push_back(l.grad());
    return out;
  };
  auto c = run(cpu_device()), g = run(kGpu);
  for (size_t i = 0; i < c.size(); ++i)
    expect_close(g[i], c[i], 1e-4, "autograd output " + std::to_string(i));
}

TEST(CudaParity, SgdStepMatchesTheCpu) {
  REQUIRE_CUDA();
  Rng rng(16);
  struct Run {
    double lr, momentum, dampening, wd;
    bool nesterov;
  };
  for (DType t : kFloatTypes)
    for (const Run& r :
         {Run{0.1, 0, 0, 0, false}, Run{0.1, 0, 0, 0.01, false}, Run{0.01, 0.9, 0, 0, false},
          Run{0.01, 0.9, 0.1, 5e-4, false}, Run{0.01, 0.9, 0, 1e-3, true}}) {
      std::vector<Tensor> p, g, b, gp, gg, gb;
      for (Shape s : {Shape{6, 3, 5, 5}, Shape{6}, Shape{120, 400}, Shape{10}}) {
        p.push_back(randn(s, rng, t));
        g.push_back(randn(s, rng, t));
        b.push_back(Tensor::empty(s, t));
        gp.push_back(gpu(p.back()));
        gg.push_back(gpu(g.back()));
        gb.push_back(Tensor::empty(s, t, kGpu));
      }
      g[1] = gg[1] = Tensor();  // a parameter without a gradient is left alone
      for (int step = 0; step < 3; ++step) {
        ops::SgdParams h{r.lr, r.momentum, r.dampening, r.wd, r.nesterov, step == 0};
        ops::sgd_step(p, g, b, h);
        ops::sgd_step(gp, gg, gb, h);
      }
      std::string tag = std::string("sgd ") + dtype_name(t) + " momentum " +
                        std::to_string(r.momentum) + (r.nesterov ? " nesterov" : "");
      for (size_t k = 0; k < p.size(); ++k) {
        expect_close(gp[k], p[k], tol_for(t), tag + " param " + std::to_string(k));
        if (r.momentum != 0 && k != 1)
          expect_close(gb[k], b[k], tol_for(t), tag + " buffer " + std::to_string(k));
      }
    }
}

TEST(CudaParity, ReshapeAndAutogradThroughASmallNet) {
  REQUIRE_CUDA();
  Rng rng(17);
  Tensor x = randn({3, 3, 12, 12}, rng), w1 = randn({4, 3, 3, 3}, rng), b1 = randn({4}, rng);
  Tensor w2 = randn({5, 4 * 5 * 5}, rng), b2 = randn({5}, rng);
  Tensor tgt = Tensor::from_labels({0, 4, 2});
  auto run = [&](Device d) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {x, w1, b1, w2, b2}) {
      Tensor l = t.to(d);
      if (l.same(t)) l = t.clone();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor h = F::conv2d_relu(leaves[0], leaves[1], leaves[2], 1, 0);  // (3, 4, 10, 10)
    h = F::max_pool2d(h, 2, 2);                                        // (3, 4, 5, 5)
    h = F::add(h, F::relu(h));                                         // two paths meet
    h = F::reshape(h, {3, -1});                                        // (3, 100)
    Tensor logits = F::linear(h, leaves[3], leaves[4]);
    Tensor loss = F::add(F::cross_entropy(logits, tgt.to(d), 0.05),
                         F::mean(F::nll_loss(F::log_softmax(logits), tgt.to(d))));
    loss = F::add(loss, F::sum(logits));
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), logits.detach()};
    for (auto& l : leaves) out.push_back(l.grad());
    return out;
  };
  auto c = run(cpu_device()), g = run(kGpu);
  for (size_t i = 0; i < c.size(); ++i)
    expect_close(g[i], c[i], 1e-4, "autograd output " + std::to_string(i));
}

// ---- the golden LeNet run on the GPU ----

namespace {
const std::string kGoldenDir = std::string(HPCNET_SOURCE_DIR) + "/tests/golden/";

void expect_near_all(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_vector_f64(), b = want.to_vector_f64();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
}

std::shared_ptr<nn::Module> lenet_on_gpu(const SafetensorsFile& g) {
  auto model = nn::make_model("lenet");
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : model->named_parameters()) state[name] = g.at("init." + name);
  model->load_state_dict(state);
  for (auto& [name, p] : model->named_parameters()) p.to_(kGpu);
  return model;
}
}  // namespace

TEST(CudaGolden, LenetForwardAndBackwardMatchPyTorch) {
  REQUIRE_CUDA();
  SafetensorsFile g = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
  auto model = lenet_on_gpu(g);
  for (auto& [name, p] : model->named_parameters()) ASSERT_TRUE(p.device().is_cuda()) << name;
  Tensor logits = model->forward(g.at("inputs").to(kGpu));
  ASSERT_TRUE(logits.device().is_cuda());
  expect_near_all(logits, g.at("logits"), 2e-5, "logits");
  Tensor loss = F::cross_entropy(logits, g.at("labels").to(kGpu));
  EXPECT_NEAR(loss.item(), g.at("loss").item(), 2e-5);
  loss.backward();
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().device().is_cuda()) << name;
    expect_near_all(p.grad(), g.at("grad." + name), 1e-5, "grad." + name);
  }
}

TEST(CudaGolden, LenetTenSgdStepsMatchPyTorch) {
  REQUIRE_CUDA();
  SafetensorsFile g = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
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
    auto model = lenet_on_gpu(g);
    optim::SGD opt(model->named_parameters(), run.opt);
    std::vector<double> want_losses = g.at(run.name + "_losses").to_vector_f64();
    for (int64_t s = 0; s < 10; ++s) {
      Tensor x = Tensor::empty({2, 3, 32, 32});
      std::memcpy(x.data<float>(), inputs.data<float>() + s * 2 * 3 * 32 * 32, x.nbytes());
      Tensor y =
          Tensor::from_labels({labels.data<int64_t>()[2 * s], labels.data<int64_t>()[2 * s + 1]});
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model->forward(x.to(kGpu)), y.to(kGpu));
      EXPECT_NEAR(loss.item(), want_losses[s], 2e-5) << run.name << " step " << s;
      loss.backward();
      opt.step();
    }
    for (auto& [name, p] : model->named_parameters()) {
      ASSERT_TRUE(p.device().is_cuda()) << name;
      expect_near_all(p, g.at(run.name + "." + name), 1e-5, run.name + "." + name);
    }
  }
}

// ---- the shared arithmetic's index math, checked on the host (no GPU needed) ----

TEST(CudaMath, PoolWindowsCoveringMatchesBruteForce) {
  for (int64_t n = 1; n <= 9; ++n)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t pad = 0; 2 * pad <= k; ++pad) {
          int64_t out = ops::conv_out_size(n, k, stride, pad);
          if (out <= 0) continue;
          for (int64_t i = 0; i < n; ++i) {
            int64_t lo, hi;
            math::pool_windows_covering(i, k, stride, pad, out, lo, hi);
            for (int64_t o = 0; o < out; ++o) {
              bool covers = o * stride - pad <= i && i < o * stride - pad + k;
              EXPECT_EQ(covers, o >= lo && o <= hi)
                  << "n " << n << " k " << k << " stride " << stride << " pad " << pad << " i " << i
                  << " o " << o;
            }
          }
        }
}

// The CUDA pool kernels' per-thread bodies (math::pool_window_max per output,
// math::pool_grad_gather per input) run here on the host over whole planes, against the CPU
// kernels: same maxima, same positions, and bit-identical input gradients.
TEST(CudaMath, PoolGatherReproducesTheCpuScatter) {
  Rng rng(18);
  struct Case {
    Shape x;
    ops::Pool2dParams p;
  };
  for (const Case& c :
       {Case{{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}}, Case{{1, 2, 7, 7}, {3, 3, 2, 2, 1, 1}},
        Case{{1, 1, 9, 8}, {3, 2, 1, 2, 1, 0}}, Case{{1, 1, 5, 5}, {3, 3, 1, 1, 1, 1}}}) {
    Tensor x = randn(c.x, rng);
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); i += 3) px[i] = 0.25f;  // ties
    int64_t P = ops::conv_out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h);
    int64_t Q = ops::conv_out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w);
    Shape ys = {c.x[0], c.x[1], P, Q};
    Tensor y = Tensor::empty(ys), dx = Tensor::empty(c.x), ws, dy = randn(ys, rng);
    ops::max_pool2d_forward(x, y, &ws, c.p);
    ops::max_pool2d_backward(dy, ws, dx, c.p);
    math::PoolGeom g{c.x[2],       c.x[3],       c.p.kernel_h, c.p.kernel_w,
                     c.p.stride_h, c.p.stride_w, c.p.pad_h,    c.p.pad_w};
    int64_t planes = c.x[0] * c.x[1], HW = c.x[2] * c.x[3];
    for (int64_t pl = 0; pl < planes; ++pl) {
      for (int64_t o = 0; o < P * Q; ++o) {
        float best;
        int64_t at;
        math::pool_window_max(px + pl * HW, g, o / Q, o % Q, best, at);
        ASSERT_EQ(best, y.data<float>()[pl * P * Q + o]);
        ASSERT_EQ(at, ws.data<int32_t>()[pl * P * Q + o]);
      }
      for (int64_t i = 0; i < HW; ++i) {
        float v =
            math::pool_grad_gather(dy.data<float>() + pl * P * Q, ws.data<int32_t>() + pl * P * Q,
                                   g, P, Q, i / c.x[3], i % c.x[3]);
        ASSERT_EQ(v, dx.data<float>()[pl * HW + i]) << "plane " << pl << " input " << i;
      }
    }
  }
}

// The elementwise and detection ops through autograd: each op's output and its inputs'
// gradients (for a random output weighting) on the GPU against the CPU, float32 and float64, with
// blocked-free row-major inputs. Targets and weights are constants. One test per op:
// Ops/<op>.CudaParity.
namespace {

using ParityFn = std::function<Tensor(const std::vector<Tensor>&)>;
struct ParityCase {
  std::string name;
  ParityFn f;
  std::vector<Shape> shapes;
};

std::vector<ParityCase> parity_cases() {
  auto on = [](const Tensor& t, const Tensor& like) {
    return t.to(like.dtype()).to(like.device());
  };
  return {
      {"silu", [](auto& v) { return F::silu(v[0]); }, {{3, 70001}}},
      {"gelu", [](auto& v) { return F::gelu(v[0]); }, {{3, 70001}}},
      {"gelu", [](auto& v) { return F::gelu(v[0], "tanh"); }, {{5, 7}}},
      {"sigmoid", [](auto& v) { return F::sigmoid(v[0]); }, {{5, 7}}},
      {"mul", [](auto& v) { return F::mul(v[0], v[1]); }, {{4, 9}, {4, 9}}},
      {"narrow", [](auto& v) { return F::narrow(v[0], 1, 3, 5); }, {{2, 10, 6}}},
      {"bce_with_logits",
       [on](auto& v) {
         return F::bce_with_logits(v[0], on(Tensor::full({6, 50}, 0.25), v[0]));
       },
       {{6, 50}}},
      {"gather_anchors",
       [on](auto& v) {
         return F::gather_anchors(v[0], Tensor::from_labels({0, 13, 7, 13, 27}).to(v[0].device()));
       },
       {{2, 5, 14}}},
      {"dfl_expect", [](auto& v) { return F::dfl_expect(v[0]); }, {{37, 16}}},
      {"ciou_loss",
       [on](auto& v) {
         Tensor q =
             on(Tensor::from_vector_f64({0, 0, 4, 4, 1, 2, 3, 9, -2, -2, 5, 1}, {3, 4}), v[0]);
         Tensor w = on(Tensor::from_vector_f64({1, 0.5, 2}, {3}), v[0]);
         Tensor p = F::add(
             v[0],
             on(Tensor::from_vector_f64({0, 0, 5, 5, 1, 1, 4, 8, -1, -3, 4, 2}, {3, 4}), v[0]));
         return F::ciou_loss(p, q, w);
       },
       {{3, 4}}},
      {"dfl_loss",
       [on](auto& v) {
         Tensor t = on(Tensor::from_vector_f64({0.5, 3.2, 14.99, 9.0}, {4}), v[0]);
         return F::dfl_loss(v[0], t, on(Tensor::full({4}, 0.5), v[0]));
       },
       {{4, 16}}},
      // softmax, bmm, depthwise_conv2d (YOLO11's attention and DWConv).
      {"softmax", [](auto& v) { return F::softmax(v[0], -1); }, {{8, 64, 256}}},
      {"softmax", [](auto& v) { return F::softmax(v[0], 1); }, {{3, 37, 300}}},
      {"softmax", [](auto& v) { return F::softmax(v[0], 0); }, {{5, 7}}},
      {"bmm", [](auto& v) { return F::bmm(v[0], v[1]); }, {{3, 17, 33}, {3, 33, 9}}},
      {"bmm", [](auto& v) { return F::bmm(v[0], v[1], true, false); }, {{8, 32, 64}, {8, 32, 64}}},
      {"bmm", [](auto& v) { return F::bmm(v[0], v[1], false, true); }, {{8, 64, 64}, {8, 16, 64}}},
      {"bmm", [](auto& v) { return F::bmm(v[0], v[1], true, true); }, {{2, 5, 3}, {2, 7, 5}}},
      {"depthwise_conv2d",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); },
       {{2, 64, 20, 20}, {64, 1, 3, 3}, {64}}},
      {"depthwise_conv2d",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 2, 2); },
       {{2, 5, 13, 11}, {5, 1, 5, 3}}},
  };
}

// The cases of one op, in each float dtype.
void run_parity(const std::string& op) {
  REQUIRE_CUDA();
  std::vector<ParityCase> cases;
  for (ParityCase& c : parity_cases())
    if (c.name == op) cases.push_back(std::move(c));
  Rng rng(77);
  for (DType t : kFloatTypes)
    for (const ParityCase& c : cases) {
      const std::string tag = c.name + " " + dtype_name(t);
      std::vector<Tensor> cpu_in, gpu_in;
      for (const Shape& s : c.shapes) {
        Tensor x = randn(s, rng, t);
        cpu_in.push_back(x.clone());
        gpu_in.push_back(gpu(x));
        cpu_in.back().set_requires_grad(true);
        gpu_in.back().set_requires_grad(true);
      }
      Tensor y = c.f(cpu_in), gy = c.f(gpu_in);
      expect_close(gy, y, tol_for(t), tag + " forward");
      Tensor r = randn(y.shape(), rng, t);
      y.backward(r);
      gy.backward(gpu(r));
      for (size_t k = 0; k < cpu_in.size(); ++k)
        expect_close(gpu_in[k].grad(), cpu_in[k].grad(), tol_for(t),
                     tag + " grad " + std::to_string(k));
    }
}

const bool kParityRegistered = [] {
  std::set<std::string> ops;
  for (const ParityCase& c : parity_cases()) ops.insert(c.name);
  for (const std::string& op : ops)
    test_util::register_op_check(
        op, "CudaParity", [op] { run_parity(op); }, __FILE__, __LINE__);
  return true;
}();

}  // namespace
