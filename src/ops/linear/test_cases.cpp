// The test cases of linear (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs, PyTorch
// goldens and kernel-level CUDA parity checks (outputs pre-filled with NaN). Compiled into the test
// binary only.
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

std::vector<ops::SampleCase> linear_samples() {
  return {
      {op_name::linear, [](auto& v) { return F::linear(v[0], v[1], v[2]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 5}, r), randn64({4, 5}, r), randn64({4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"linear_relu no bias", [](auto& v) { return F::linear_relu(v[0], v[1], Tensor()); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 5}, r), randn64({4, 5}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> linear_errors() {
  return {
      err("input of rank 1",
          [](D d) {
            return F::linear(f32({8}, d), f32({4, 8}, d), kNone);
          },
          {"(8,)"}),
      err("weight of rank 3",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8, 1}, d), kNone);
          },
          {"(4, 8, 1)"}),
      err("in_features differ",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 7}, d), kNone);
          },
          {"(4, 7)", "(2, 8)"}),
      err("bias of the wrong size",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(4,)"}),
      err("float64 weight with a float32 input",
          [](D d) {
            return F::linear(f32({2, 8}, d), f64({4, 8}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("float64 bias with a float32 input",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8}, d), f64({4}, d));
          },
          {"bias", "float64", "float32"}),
      err("int64 input and weight",
          [](D d) {
            return F::linear(i64({2, 8}, d), i64({4, 8}, d), kNone);
          },
          {"int64"}),
      err("0 in_features",
          [](D d) {
            return F::linear(f32({2, 0}, d), f32({4, 0}, d), kNone);
          },
          {"(2, 0)"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::linear(f32({0, 8}, d), f32({4, 8}, d), f32({4}, d));
         },
         {0, 4}),
      err("undefined input",
          [](D d) {
            return F::linear(kNone, f32({4, 8}, d), kNone);
          },
          {"undefined"}),
      err("undefined weight",
          [](D d) {
            return F::linear(f32({2, 8}, d), kNone, kNone);
          },
          {"undefined"}),
  };
}

// (was CudaParity.Linear in tests/ops/test_cuda.cpp)
void linear_kernel_parity() {
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

// Gemm's round trips: a batch of 3 (the exported (1, 3, 5, 5) image reshaped to (3, 25)) with
// a bias, and flatten(x, 1) into linear_relu without one.
std::vector<ops::OnnxCase> linear_onnx() {
  return {
      {"(3, 25) x (4, 25)^T + bias",
       [](const Tensor& x, auto& p) {
         return F::linear(F::reshape(x, {3, 25}), p[0], p[1]);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn({4, 25}, r), randn({4}, r)};
       },
       {{"Gemm", 1}, {"Reshape", 1}}},
      {"linear_relu of flatten(x, 1), (1, 63) x (5, 63)^T, no bias",
       [](const Tensor& x, auto& p) { return F::linear_relu(F::flatten(x, 1), p[0], Tensor()); },
       [](Rng& r) {
         return std::vector<Tensor>{randn({5, 63}, r)};
       },
       {{"Flatten", 1}, {"Gemm", 1}, {"Relu", 1}},
       3,
       7,
       3}};
}

}  // namespace

ops::OpCases op_cases::linear() {
  return {
      .samples = linear_samples(),
      .errors = linear_errors(),
      .goldens = {{op_name::linear,
                   {"x", "w", "b"},
                   [](auto& v) { return F::linear(v[0], v[1], v[2]); }}},
      .checks = {{"CudaParity", "the kernels, outputs pre-filled with NaN", linear_kernel_parity}},
      .onnx = linear_onnx(),
      .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
