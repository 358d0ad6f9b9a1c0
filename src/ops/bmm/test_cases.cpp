// The test cases of bmm (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks and error inputs. Compiled
// into the test binary only.
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
// Two normal inputs a, b.
ops::CaseInputs two(Shape a, Shape b) {
  return [a, b](Rng& r) { return std::vector<Tensor>{randn64(a, r), randn64(b, r)}; };
}

std::vector<ops::SampleCase> bmm_samples() {
  return {
      {op_name::bmm, [](auto& v) { return F::bmm(v[0], v[1]); }, two({2, 3, 4}, {2, 4, 5}),
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"bmm a transposed (q^T k)", [](auto& v) { return F::bmm(v[0], v[1], true, false); },
       two({3, 4, 5}, {3, 4, 2}), ops::kCheckGrad | ops::kCheckCudaParity},
      {"bmm b transposed (v attn^T)", [](auto& v) { return F::bmm(v[0], v[1], false, true); },
       two({2, 3, 4}, {2, 5, 4}), ops::kCheckGrad | ops::kCheckCudaParity},
      {"bmm both transposed", [](auto& v) { return F::bmm(v[0], v[1], true, true); },
       two({2, 4, 3}, {2, 5, 4}), ops::kCheckGrad | ops::kCheckCudaParity},
      {"bmm of narrowed operands",
       [](auto& v) {
         return F::bmm(F::narrow(v[0], 1, 1, 3), F::narrow(v[0], 1, 4, 3), true, false);
       },
       r64({2, 7, 4}), ops::kCheckGrad | ops::kCheckCudaParity},
      {"bmm parity (3, 17, 33) (3, 33, 9)", [](auto& v) { return F::bmm(v[0], v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 17, 33}, r), randn64({3, 33, 9}, r)};
       },
       ops::kCheckCudaParity},
      {"bmm parity (8, 32, 64) (8, 32, 64)",
       [](auto& v) { return F::bmm(v[0], v[1], true, false); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({8, 32, 64}, r), randn64({8, 32, 64}, r)};
       },
       ops::kCheckCudaParity},
      {"bmm parity (8, 64, 64) (8, 16, 64)",
       [](auto& v) { return F::bmm(v[0], v[1], false, true); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({8, 64, 64}, r), randn64({8, 16, 64}, r)};
       },
       ops::kCheckCudaParity},
      {"bmm parity (2, 5, 3) (2, 7, 5)", [](auto& v) { return F::bmm(v[0], v[1], true, true); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 5, 3}, r), randn64({2, 7, 5}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> bmm_errors() {
  return {
      err("a of rank 2",
          [](D d) {
            return F::bmm(f32({3, 4}, d), f32({2, 4, 5}, d));
          },
          {"3-D", "(3, 4)"}),
      err("inner sizes differ",
          [](D d) {
            return F::bmm(f32({2, 3, 4}, d), f32({2, 5, 6}, d));
          },
          {"inner sizes differ", "(2, 3, 4)", "(2, 5, 6)"}),
      err("inner sizes differ once a is transposed",
          [](D d) {
            return F::bmm(f32({2, 3, 4}, d), f32({2, 4, 5}, d), true, false);
          },
          {"inner sizes differ", "transposed to (2, 4, 3)"}),
      err("batch sizes differ",
          [](D d) {
            return F::bmm(f32({2, 3, 4}, d), f32({3, 4, 5}, d));
          },
          {"batch sizes differ"}),
      err("float64 b with a float32 a",
          [](D d) {
            return F::bmm(f32({2, 3, 4}, d), f64({2, 4, 5}, d));
          },
          {"float64", "float32"}),
      err("int64 operands",
          [](D d) {
            return F::bmm(i64({2, 3, 4}, d), i64({2, 4, 5}, d));
          },
          {"int64"}),
      err("undefined b",
          [](D d) {
            return F::bmm(f32({2, 3, 4}, d), kNone);
          },
          {"undefined"}),
      ok("empty inner size (torch: zeros)",
         [](D d) {
           return F::bmm(f32({2, 3, 0}, d), f32({2, 0, 5}, d));
         },
         {2, 3, 5}),
      ok("empty batch",
         [](D d) {
           return F::bmm(f32({0, 3, 4}, d), f32({0, 4, 5}, d));
         },
         {0, 3, 5}),
  };
}

}  // namespace

ops::OpCases op_cases::bmm() {
  return {
      .samples = bmm_samples(),
      .errors = bmm_errors(),
      .goldens = {{op_name::bmm, {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1]); }},
                  {"bmm_ta", {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1], true, false); }},
                  {"bmm_tb", {"a", "b"}, [](auto& v) { return F::bmm(v[0], v[1], false, true); }}},
      .onnx = {{"YOLO11's attention products on (3, 6, 6): q^T k, v attn^T, a plain product",
                [](const Tensor& x, auto&) {
                  const Tensor a = F::reshape(x, {3, 6, 6});
                  const Tensor attn = F::bmm(a, F::mul_scalar(a, 0.5), true, false);
                  return F::reshape(F::bmm(F::bmm(a, attn, false, true), a), {1, 3, 6, 6});
                },
                nullptr,
                {{"MatMul", 3}, {"Transpose", 2}},
                3,
                6,
                6}},
      .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
