// The test cases of softmax (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
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

// Normal inputs of one shape, times 2.
ops::CaseInputs r64(Shape s) {
  return [s](Rng& r) { return std::vector<Tensor>{randn64(s, r, 2.0)}; };
}

std::vector<ops::SampleCase> softmax_samples() {
  return {
      {"softmax dim -1 (rows)", [](auto& v) { return F::softmax(v[0], -1); }, r64({2, 3, 5}),
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"softmax dim 1 of 3", [](auto& v) { return F::softmax(v[0], 1); }, r64({2, 4, 3}),
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"softmax dim 0", [](auto& v) { return F::softmax(v[0], 0); }, r64({3, 4}),
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"softmax dim -3 of 4-D", [](auto& v) { return F::softmax(v[0], -3); }, r64({2, 3, 2, 2}),
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"softmax parity (8, 64, 256)", [](auto& v) { return F::softmax(v[0], -1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({8, 64, 256}, r)};
       },
       ops::kCheckCudaParity},
      {"softmax parity (3, 37, 300)", [](auto& v) { return F::softmax(v[0], 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 37, 300}, r)};
       },
       ops::kCheckCudaParity},
      {"softmax parity (5, 7)", [](auto& v) { return F::softmax(v[0], 0); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({5, 7}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> softmax_errors() {
  return {
      err("int64 input",
          [](D d) {
            return F::softmax(i64({2, 3}, d), -1);
          },
          {"int64", "(2, 3)"}),
      err("undefined input", [](D) { return F::softmax(kNone, 0); }, {"undefined"}),
      err("dim 2 of a 2-D input",
          [](D d) {
            return F::softmax(f32({2, 3}, d), 2);
          },
          {"dim 2", "(2, 3)", "-2 <= dim < 2"}),
      err("dim -3 of a 2-D input",
          [](D d) {
            return F::softmax(f32({2, 3}, d), -3);
          },
          {"dim -3", "-2 <= dim < 2"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::softmax(f32({0, 3}, d), 1);
         },
         {0, 3}),
      ok("a 0-d input (torch: 1)", [](D d) { return F::softmax(f32({}, d), -1); }, {}),
  };
}

}  // namespace

ops::OpCases op_cases::softmax() {
  return {.samples = softmax_samples(),
          .errors = softmax_errors(),
          .goldens = {{"softmax_last", {"x"}, [](auto& v) { return F::softmax(v[0], -1); }},
                      {"softmax_dim1", {"x"}, [](auto& v) { return F::softmax(v[0], 1); }}},
          .onnx = {{"softmax over the last dim, then over the channels",
                    [](const Tensor& x, auto&) {
                      return F::softmax(F::mul_scalar(F::softmax(F::mul_scalar(x, 4.0), -1), 3.0),
                                        1);
                    },
                    nullptr,
                    {{"Softmax", 2}},
                    3,
                    6,
                    6}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
