// The test cases of batch_norm (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs, PyTorch
// goldens, ONNX round trips and kernel-level CUDA parity checks (outputs pre-filled with NaN).
// Compiled into the test binary only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"

namespace hpcnet {
namespace {

using namespace ops::cases;
using namespace ops::case_checks;
using D = Device;
const Device kGpu = gpu_device();

std::vector<ops::SampleCase> batch_norm_samples() {
  return {
      {"batch_norm training",
       [](auto& v) { return F::batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 2, 3, 2}, r, 2.0), randn64({2}, r),
                                    randn64({2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"batch_norm eval",
       [](auto& v) {
         Tensor rm = Tensor::from_vector_f64({0.3, -0.2}, {2});
         Tensor rv = Tensor::from_vector_f64({1.5, 0.7}, {2});
         return F::batch_norm(v[0], v[1], v[2], rm, rv, false);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r)};
       }},
      {"batch_norm + residual + relu (fused) without affine",
       [](auto& v) {
         return F::batch_norm_act(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                                  v[1], true);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 2, 3}, r), randn64({2, 3, 2, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"sync_batch_norm training, one rank",
       [](auto& v) {
         return F::sync_batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), 0.1, 1e-5, Tensor(),
                                       false, F::RankSum{});
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 2, 3, 2}, r, 2.0), randn64({2}, r),
                                    randn64({2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"sync_batch_norm + residual + relu, an identity rank sum",
       [](auto& v) {
         return F::sync_batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), 0.1, 1e-5, v[3], true,
                                       [](double*, size_t) {});
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r),
                                    randn64({2, 2, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"batch_norm + residual + relu with affine",
       [](auto& v) {
         return F::batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5, v[3],
                                  true);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r),
                                    randn64({2, 2, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> batch_norm_errors() {
  return {
      err("input of rank 2",
          [](D d) {
            return F::batch_norm(f32({4, 3}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(4, 3)"}),
      err("weight of the wrong size",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), f32({4}, d), kNone, kNone, kNone, true);
          },
          {"weight", "(3,)", "(4,)"}),
      err("running_mean of the wrong size",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, f32({2}, d), f32({3}, d),
                                 false);
          },
          {"running_mean", "(2,)"}),
      err("eval without running statistics",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, false);
          },
          {"running_mean"}),
      err("training with one value per channel",
          [](D d) {
            return F::batch_norm(f32({1, 3, 1, 1}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(1, 3, 1, 1)"}),
      err("eps 0",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true, 0.1, 0.0);
          },
          {"eps 0"}),
      err("momentum 2",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true, 2.0);
          },
          {"momentum 2"}),
      err("int64 input",
          [](D d) {
            return F::batch_norm(i64({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true);
          },
          {"int64"}),
      err("float64 weight with a float32 input",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), f64({3}, d), f32({3}, d), kNone, kNone,
                                 true);
          },
          {"weight", "float64", "float32"}),
      err("float64 running_var with a float32 input",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, f32({3}, d), f64({3}, d),
                                 false);
          },
          {"running_var", "float64", "float32"}),
      err("training on a batch of 0 (as torch)",
          [](D d) {
            return F::batch_norm(f32({0, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(0, 3, 4, 4)"}),
      ok("eval on a batch of 0 (torch: an empty output)",
         [](D d) {
           return F::batch_norm(f32({0, 3, 4, 4}, d), kNone, kNone, f32({3}, d), f32({3}, d),
                                false);
         },
         {0, 3, 4, 4}),
      ok("0 channels (torch: an empty output)",
         [](D d) {
           return F::batch_norm(f32({2, 0, 4, 4}, d), kNone, kNone, kNone, kNone, true);
         },
         {2, 0, 4, 4}),
      err("undefined input",
          [](D) { return F::batch_norm(kNone, kNone, kNone, kNone, kNone, true); }, {"undefined"}),
  };
}

// (was CudaParity.BatchNormTrainAndEvalWithResidualAndRelu in tests/ops/test_cuda.cpp)
void batch_norm_kernel_parity() {
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
// (was CudaParity.SyncBatchNormThroughAutograd in tests/ops/test_cuda.cpp)
void sync_batch_norm_parity() {
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

// Training and eval against PyTorch in float64, with the running statistics it leaves
// (tests/golden/resnet_golden.safetensors; was GoldenResNet.OpsMatchPyTorchInFloat64).
void batch_norm_golden() {
  const std::string f = "resnet_golden.safetensors";
  for (bool training : {true, false}) {
    std::string pre = training ? "bn_train" : "bn_eval";
    Tensor rm = golden_entry(f, pre + ".running_mean_in").clone();
    Tensor rv = golden_entry(f, pre + ".running_var_in").clone();
    check_golden(f, {pre, {"x", "weight", "bias"}, [&](auto& v) {
                       return F::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5);
                     }});
    expect_near_all(rm, golden_entry(f, pre + ".running_mean_out"), 1e-10, 1e-10,
                    pre + ".running_mean");
    expect_near_all(rv, golden_entry(f, pre + ".running_var_out"), 1e-10, 1e-10,
                    pre + ".running_var");
  }
}

}  // namespace

ops::OpCases op_cases::batch_norm() {
  return {.samples = batch_norm_samples(),
          .errors = batch_norm_errors(),
          .checks = {{"PyTorchGoldenFloat64", "training and eval, with the running statistics",
                      batch_norm_golden},
                     {"CudaParity", "the kernels, train and eval, residual and relu",
                      batch_norm_kernel_parity},
                     {"CudaParity", "SyncBatchNorm through autograd, one rank",
                      sync_batch_norm_parity}},
          .onnx = {{"batch_norm eval with running statistics",
                    [](const Tensor& x, auto& p) {
                      return F::batch_norm(x, p[0], p[1], p[2], p[3], false);
                    },
                    [](Rng& r) {
                      Tensor var = Tensor::from_vector_f64({0.5, 1.5, 2.0}, {3});
                      return std::vector<Tensor>{
                          randn64({3}, r).to(DType::kFloat32), randn64({3}, r).to(DType::kFloat32),
                          randn64({3}, r).to(DType::kFloat32), var.to(DType::kFloat32)};
                    },
                    {{"BatchNormalization", 1}}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
