// The test cases of relu, add, mul_scalar, reshape, sum, mean, silu, sigmoid and mul
// (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as Ops/<op>.*): samples for the
// finite-difference and CUDA parity checks, error inputs, PyTorch goldens, ONNX round trips and
// kernel-level CUDA parity checks (outputs pre-filled with NaN). Compiled into the test binary
// only.
#include <cmath>
#include <functional>
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

std::vector<ops::SampleCase> relu_samples() {
  return {
      {op_name::relu, [](auto& v) { return F::relu(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 7}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> relu_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::relu(i64({2, 3}, d));
          },
          {"int64"}),
      err("uint8 input",
          [](D d) {
            return F::relu(u8({2, 3}, d));
          },
          {"uint8"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::relu(f32({0, 3}, d));
         },
         {0, 3}),
      err("undefined input", [](D) { return F::relu(kNone); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> add_samples() {
  return {
      {op_name::add, [](auto& v) { return F::add(v[0], v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 4}, r), randn64({2, 3, 4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"add same input twice", [](auto& v) { return F::add(v[0], F::relu(v[0])); },
       [](Rng& r) { return std::vector<Tensor>{randn64({5}, r)}; },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> add_errors() {
  return {
      err("shapes differ",
          [](D d) {
            return F::add(f32({2, 3}, d), f32({3, 2}, d));
          },
          {"(2, 3)", "(3, 2)"}),
      err("float64 and float32",
          [](D d) {
            return F::add(f32({2, 3}, d), f64({2, 3}, d));
          },
          {"float64", "float32"}),
      err("int64 inputs",
          [](D d) {
            return F::add(i64({2, 3}, d), i64({2, 3}, d));
          },
          {"int64"}),
      ok("empty inputs (torch: an empty output)",
         [](D d) {
           return F::add(f32({0, 3}, d), f32({0, 3}, d));
         },
         {0, 3}),
      err("undefined first input",
          [](D d) {
            return F::add(kNone, f32({2, 3}, d));
          },
          {"undefined"}),
      err("undefined second input",
          [](D d) {
            return F::add(f32({2, 3}, d), kNone);
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> mul_scalar_samples() {
  return {
      {"mul_scalar by -0.37", [](auto& v) { return F::mul_scalar(v[0], -0.37); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> mul_scalar_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::mul_scalar(i64({2, 3}, d), 2.0);
          },
          {"int64"}),
      err("uint8 input",
          [](D d) {
            return F::mul_scalar(u8({2, 3}, d), 2.0);
          },
          {"uint8"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::mul_scalar(f32({0, 3}, d), 2.0);
         },
         {0, 3}),
      err("undefined input", [](D) { return F::mul_scalar(kNone, 2.0); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> reshape_samples() {
  return {
      {"flatten then linear",
       [](auto& v) { return F::linear(F::flatten(v[0], 1), v[1], Tensor()); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 2, 3}, r), randn64({3, 12}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> reshape_errors() {
  return {
      err("element counts differ",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {4, 2});
          },
          {"(4, 2)", "(2, 3)"}),
      err("two -1 dims",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {-1, -1});
          },
          {"(-1, -1)"}),
      err("negative sizes",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {-2, -3});
          },
          {"(-2, -3)"}),
      err("-1 beside a 0 (any size would do)",
          [](D d) {
            return F::reshape(f32({0, 3}, d), {-1, 0});
          },
          {"(-1, 0)", "(0, 3)"}),
      ok("empty input (torch: an empty view)",
         [](D d) {
           return F::reshape(f32({0, 3}, d), {3, 0});
         },
         {3, 0}),
      err("undefined input",
          [](D) {
            return F::reshape(kNone, {2, 3});
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> sum_samples() {
  return {
      {op_name::sum, [](auto& v) { return F::sum(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> sum_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::sum(i64({2, 3}, d));
          },
          {"int64"}),
      err("uint8 input",
          [](D d) {
            return F::sum(u8({2, 3}, d));
          },
          {"uint8"}),
      ok_value(
          "empty input (torch: 0)",
          [](D d) {
            return F::sum(f32({0, 3}, d));
          },
          0.0),
      err("undefined input", [](D) { return F::sum(kNone); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> mean_samples() {
  return {
      {op_name::mean, [](auto& v) { return F::mean(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 5}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> mean_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::mean(i64({2, 3}, d));
          },
          {"int64"}),
      err("uint8 input",
          [](D d) {
            return F::mean(u8({2, 3}, d));
          },
          {"uint8"}),
      ok_value(
          "empty input (torch: NaN)",
          [](D d) {
            return F::mean(f32({0, 3}, d));
          },
          NAN),
      err("undefined input", [](D) { return F::mean(kNone); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> silu_samples() {
  return {
      {op_name::silu, [](auto& v) { return F::silu(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 4}, r, 3.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"silu of (3, 70001)", [](auto& v) { return F::silu(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 70001}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> silu_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::silu(i64({2, 3}, d));
          },
          {"int64", "(2, 3)"}),
      err("undefined input", [](D) { return F::silu(kNone); }, {"undefined"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::silu(f32({0, 3}, d));
         },
         {0, 3}),
  };
}

std::vector<ops::SampleCase> sigmoid_samples() {
  return {
      {op_name::sigmoid, [](auto& v) { return F::sigmoid(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 5}, r, 3.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"sigmoid of (5, 7)", [](auto& v) { return F::sigmoid(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({5, 7}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> sigmoid_errors() {
  return {
      err("uint8 input", [](D d) { return F::sigmoid(u8({4}, d)); }, {"uint8", "(4,)"}),
      err("undefined input", [](D) { return F::sigmoid(kNone); }, {"undefined"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::sigmoid(f32({2, 0}, d));
         },
         {2, 0}),
  };
}

std::vector<ops::SampleCase> mul_samples() {
  return {
      {op_name::mul, [](auto& v) { return F::mul(v[0], v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 2}, r), randn64({2, 3, 2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"mul of a tensor by itself", [](auto& v) { return F::mul(v[0], v[0]); },
       [](Rng& r) { return std::vector<Tensor>{randn64({5}, r)}; },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"mul of (4, 9)", [](auto& v) { return F::mul(v[0], v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 9}, r), randn64({4, 9}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> mul_errors() {
  return {
      err("mismatched shapes",
          [](D d) {
            return F::mul(f32({2, 3}, d), f32({3, 2}, d));
          },
          {"(2, 3)", "(3, 2)"}),
      err("mismatched dtypes",
          [](D d) {
            return F::mul(f32({2, 3}, d), f64({2, 3}, d));
          },
          {"float32", "float64"}),
      err("int64 inputs", [](D d) { return F::mul(i64({2}, d), i64({2}, d)); }, {"int64"}),
      err("undefined second input", [](D d) { return F::mul(f32({2}, d), kNone); }, {"undefined"}),
  };
}

// The elementwise kernels and reductions over n = 1, 1000 and 300007 elements, each op's kernels
// with the same inputs x, x2, dy (was CudaParity.ElementwiseAndReductions in
// tests/ops/test_cuda.cpp).
void for_each_elementwise_input(
    const std::function<void(DType, int64_t, const Tensor&, const Tensor&, const Tensor&,
                             const std::string&)>& f) {
  Rng rng(14);
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300007}}) {
      std::string tag = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      Tensor x = randn({n}, rng, t), x2 = randn({n}, rng, t), dy = randn({n}, rng, t);
      f(t, n, x, x2, dy, tag);
    }
}

void relu_kernel_parity() {
  for_each_elementwise_input([](DType t, int64_t n, const Tensor& x, const Tensor&,
                                const Tensor& dy, const std::string& tag) {
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
  });
}

void add_kernel_parity() {
  for_each_elementwise_input([](DType t, int64_t n, const Tensor& x, const Tensor& x2,
                                const Tensor&, const std::string& tag) {
    Tensor s = nan_cpu({n}, t), gs = nan_gpu({n}, t);
    ops::add(x, x2, s);
    ops::add(gpu(x), gpu(x2), gs);
    expect_close(gs, s, 0, "add " + tag);
    Tensor acc = gpu(x);
    ops::add_inplace(acc, gpu(x2));
    expect_close(acc, s, 0, "add_inplace " + tag);
  });
}

void mul_scalar_kernel_parity() {
  for_each_elementwise_input([](DType t, int64_t n, const Tensor& x, const Tensor&, const Tensor&,
                                const std::string& tag) {
    Tensor sc = nan_cpu({n}, t), gsc = nan_gpu({n}, t);
    ops::scale(x, -0.37, sc);
    ops::scale(gpu(x), -0.37, gsc);
    expect_close(gsc, sc, 0, "scale " + tag);
  });
}

// sum or mean (mean = true), and the backward fill.
void reduction_kernel_parity(bool mean) {
  for_each_elementwise_input([mean](DType t, int64_t n, const Tensor& x, const Tensor&,
                                    const Tensor&, const std::string& tag) {
    Tensor r = nan_cpu({}, t), gr = nan_gpu({}, t);
    if (mean) {
      ops::mean_forward(x, r);
      ops::mean_forward(gpu(x), gr);
    } else {
      ops::sum_forward(x, r);
      ops::sum_forward(gpu(x), gr);
    }
    expect_close(gr, r, tol_for(t), (mean ? "mean " : "sum ") + tag);
    Tensor f = nan_cpu({n}, t), gf = nan_gpu({n}, t);
    ops::fill_like_backward(r, 1.0 / static_cast<double>(n), f);
    ops::fill_like_backward(gpu(r), 1.0 / static_cast<double>(n), gf);
    expect_close(gf, f, 0, "fill_like_backward " + tag);
  });
}

}  // namespace

ops::OpCases op_cases::relu() {
  return {.samples = relu_samples(),
          .errors = relu_errors(),
          .goldens = {{op_name::relu, {"x"}, [](auto& v) { return F::relu(v[0]); }}},
          .checks = {{"CudaParity", "the kernels, in place too", relu_kernel_parity}},
          .onnx = {{op_name::relu,
                    [](const Tensor& x, auto&) { return F::relu(x); },
                    nullptr,
                    {{"Relu", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::add() {
  return {.samples = add_samples(),
          .errors = add_errors(),
          .goldens = {{op_name::add, {"a", "b"}, [](auto& v) { return F::add(v[0], v[1]); }},
                      {"add_same", {"x"}, [](auto& v) { return F::add(v[0], v[0]); }}},
          .checks = {{"CudaParity", "the kernels, in place too", add_kernel_parity}},
          .onnx = {{"x + sigmoid(x)",
                    [](const Tensor& x, auto&) { return F::add(x, F::sigmoid(x)); },
                    nullptr,
                    {{"Add", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::mul_scalar() {
  return {
      .samples = mul_scalar_samples(),
      .errors = mul_scalar_errors(),
      .goldens = {{op_name::mul_scalar, {"x"}, [](auto& v) { return F::mul_scalar(v[0], -0.37); }},
                  {"mul_scalar_zero", {"x"}, [](auto& v) { return F::mul_scalar(v[0], 0.0); }}},
      .checks = {{"CudaParity", "the scale kernel", mul_scalar_kernel_parity}},
      .onnx = {{"x * -0.37",
                [](const Tensor& x, auto&) { return F::mul_scalar(x, -0.37); },
                nullptr,
                {{"Mul", 1}}}},
      .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::reshape() {
  return {.samples = reshape_samples(),
          .errors = reshape_errors(),
          .goldens = {{"flatten", {"x"}, [](auto& v) { return F::flatten(v[0], 1); }}},
          .onnx = {{"reshape (1, 3, 5, 5) to (1, 3, 25)",
                    [](const Tensor& x, auto&) {
                      return F::reshape(x, {1, 3, 25});
                    },
                    nullptr,
                    {{"Reshape", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::sum() {
  return {.samples = sum_samples(),
          .errors = sum_errors(),
          .goldens = {{op_name::sum, {"x"}, [](auto& v) { return F::sum(v[0]); }}},
          .checks = {{"CudaParity", "the kernels and the backward fill",
                      [] { reduction_kernel_parity(false); }}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::mean() {
  return {.samples = mean_samples(),
          .errors = mean_errors(),
          .goldens = {{op_name::mean, {"x"}, [](auto& v) { return F::mean(v[0]); }}},
          .checks = {{"CudaParity", "the kernels and the backward fill",
                      [] { reduction_kernel_parity(true); }}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::silu() {
  return {.samples = silu_samples(),
          .errors = silu_errors(),
          .goldens = {{op_name::silu, {"x"}, [](auto& v) { return F::silu(v[0]); }}},
          .onnx = {{"silu of 4 x: x sigmoid(x)",
                    [](const Tensor& x, auto&) { return F::silu(F::mul_scalar(x, 4.0)); },
                    nullptr,
                    {{"Sigmoid", 1}, {"Mul", 2}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::sigmoid() {
  return {.samples = sigmoid_samples(),
          .errors = sigmoid_errors(),
          .goldens = {{op_name::sigmoid, {"x"}, [](auto& v) { return F::sigmoid(v[0]); }}},
          .onnx = {{"sigmoid of 4 x",
                    [](const Tensor& x, auto&) { return F::sigmoid(F::mul_scalar(x, 4.0)); },
                    nullptr,
                    {{"Sigmoid", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::mul() {
  return {.samples = mul_samples(),
          .errors = mul_errors(),
          .goldens = {{op_name::mul, {"a", "b"}, [](auto& v) { return F::mul(v[0], v[1]); }},
                      {"mul_same", {"x"}, [](auto& v) { return F::mul(v[0], v[0]); }}},
          .onnx = {{"x * sigmoid(x)",
                    [](const Tensor& x, auto&) { return F::mul(x, F::sigmoid(x)); },
                    nullptr,
                    {{"Mul", 1}}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
