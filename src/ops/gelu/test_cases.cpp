// The test cases of gelu (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs, PyTorch
// goldens and ONNX round trips. Compiled into the test binary only.
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"

namespace hpcnet {
namespace {

using namespace ops::cases;
using D = Device;

std::vector<ops::SampleCase> gelu_samples() {
  return {
      {op_name::gelu, [](auto& v) { return F::gelu(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 4}, r, 3.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"gelu approximate tanh", [](auto& v) { return F::gelu(v[0], "tanh"); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 5}, r, 3.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"gelu of (3, 70001)", [](auto& v) { return F::gelu(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 70001}, r)};
       },
       ops::kCheckCudaParity},
      {"gelu tanh of (5, 7)", [](auto& v) { return F::gelu(v[0], "tanh"); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({5, 7}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> gelu_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::gelu(i64({2, 3}, d));
          },
          {"int64", "(2, 3)"}),
      err("undefined input", [](D) { return F::gelu(kNone); }, {"undefined"}),
      err("unknown approximation",
          [](D d) {
            return F::gelu(f32({2, 3}, d), "erf");
          },
          {"'none' or 'tanh'", "'erf'"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::gelu(f32({0, 3}, d));
         },
         {0, 3}),
  };
}

}  // namespace

ops::OpCases op_cases::gelu() {
  return {.samples = gelu_samples(),
          .errors = gelu_errors(),
          .goldens = {{op_name::gelu, {"x"}, [](auto& v) { return F::gelu(v[0]); }},
                      {"gelu_tanh", {"x"}, [](auto& v) { return F::gelu(v[0], "tanh"); }}},
          .onnx = {{"gelu of 4 x, erf written out",
                    [](const Tensor& x, auto&) { return F::gelu(F::mul_scalar(x, 4.0)); },
                    nullptr,
                    {{"Erf", 1}}},
                   {"gelu tanh of 4 x, tanh written out",
                    [](const Tensor& x, auto&) { return F::gelu(F::mul_scalar(x, 4.0), "tanh"); },
                    nullptr,
                    {{"Tanh", 1}}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
