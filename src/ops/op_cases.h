// An op's test cases, written once beside its kernels (ggml's test-backend-ops: one test_case per
// op serves every mode). Each op of the op table (src/ops/op_table.h) and each op without a
// gradient defines op_cases::NAME() in its family's folder, src/ops/<family>/test_cases.cpp; an op
// without one fails to link. These files and this header are compiled into the test binary only
// (CMakeLists.txt keeps them out of the library; the layer test puts them in a layer "tests" above
// every other). tests/ops/op_checks.cpp turns each op's cases into gtests named Ops/NAME.<Check>
// (`ctest -R 'Ops/silu\.'` runs silu's and nothing else):
//   GradcheckFloat64      samples marked kCheckGrad: float64 finite differences of
//                         L = sum(op(inputs) * R), |analytic - numeric| <= 1e-7 + 1e-5 |numeric|;
//   ErrorInputsCpu/Cuda   the error cases, on CPU tensors and (with a GPU) on CUDA tensors;
//   CudaParity            samples marked kCheckCudaParity, forward and input gradients through
//                         autograd, CUDA against CPU in float32 (parity_tol (1 + |cpu|)) and
//                         float64 (1e-10 (1 + |cpu|)), then the op's kernel-level checks
//                         (CustomCheck "CudaParity"); skipped where no GPU is usable;
//   PyTorchGoldenFloat64  the golden cases: PyTorch's numbers from tests/golden/ (written by
//                         tests/golden/make_golden*.py), 1e-10 (1 + |want|);
//   OnnxRoundTrip         the ONNX cases: the op exported (its record's mapping), checked by the
//                         ONNX library and run from the specification against hpcnet's output;
//   Bf16                  the op's custom checks of that name (an op without one says why in
//                         OpCases::no_bf16, most with cases::kNoBf16).
// The tests in op_checks.cpp also fail when a differentiable op has no finite-difference sample
// or neither a PyTorch golden nor a reason (OpCases::no_golden), an op has fewer than 3 error
// cases, no CUDA parity check, neither a Bf16 check nor a reason, or is exportable with neither
// an ONNX case nor a reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_table.h"

namespace hpcnet::nn {
class Module;
}  // namespace hpcnet::nn

namespace hpcnet::ops {

// The op applied to its inputs (constants it builds go beside v[0]: see like()).
using CaseCall = std::function<Tensor(const std::vector<Tensor>&)>;
// The inputs of a sample, float64 on the CPU (integer ones, targets and indices, pass through
// every check unchanged), drawn from an Rng seeded by the sample's label.
using CaseInputs = std::function<std::vector<Tensor>(Rng&)>;

enum CaseCheck : unsigned {
  kCheckGrad = 1u,        // GradcheckFloat64
  kCheckCudaParity = 2u,  // CudaParity (float32 and float64)
};

// A sample: inputs with their shapes and dtypes, the call, the checks it serves.
struct SampleCase {
  std::string label;
  CaseCall call;
  CaseInputs inputs;
  unsigned checks = kCheckGrad;
  double parity_tol = 1e-4;  // float32, CUDA against CPU, times (1 + |cpu|)
};

// A bad call and what its error must say (PyTorch's OpInfo error_inputs): it must throw a typed
// hpcnet error (InputError or Error) naming the op and containing every string of message; or,
// where hpcnet returns what torch returns (relu of an empty tensor), that result.
struct ErrorCase {
  std::string what;
  std::function<Tensor(Device)> call;
  std::vector<std::string> message;  // besides the op's name
  bool expect_error = true;
  Shape result_shape;           // the result's shape when no error is expected
  std::optional<double> value;  // a 0-d result's value (NaN matches NaN)
  // A bad label: CUDA finds it asynchronously and raises it at the next synchronisation, from
  // the device's error slot, which does not know the op (the label and its range it does).
  bool deferred_on_cuda = false;
};

// PyTorch's numbers for one call: the fixture's <prefix>.<input> entries in (float64 ones get
// gradients), <prefix>.<constant> entries after them (no gradients), <prefix>.dy backpropagated;
// <prefix>.y and every float64 input's <prefix>.d<input> compared to 1e-10 (1 + |want|).
struct GoldenCase {
  std::string prefix;
  std::vector<std::string> inputs;
  CaseCall call;
  std::vector<std::string> constants = {};
  std::string file = "ops_golden.safetensors";  // in tests/golden/
};

// A check that does not fit the tables above (kernel-level CUDA parity with outputs pre-filled
// with NaN, bfloat16 convolutions, running statistics against PyTorch's): it joins the op's test
// named `check` ("CudaParity", "PyTorchGoldenFloat64", "Bf16", "OnnxRoundTrip", ...).
struct CustomCheck {
  std::string check;
  std::string label;
  std::function<void()> run;
};

// The op exported to ONNX and run back (OnnxRoundTrip): a model whose forward applies the op to
// an image x (1, channels, height, width) drawn by the exporter, with parameters drawn from an Rng;
// its ONNX graph passes the ONNX checker, holds exactly `nodes` (type, count) among its node
// types, and run from the specification (tests/export/onnx_eval.h) gives what hpcnet computed,
// within 1e-5.
struct OnnxCase {
  std::string label;
  std::function<Tensor(const Tensor& x, const std::vector<Tensor>& params)> forward;
  std::function<std::vector<Tensor>(Rng&)> params = nullptr;  // float32; none when null
  std::vector<std::pair<std::string, int>> nodes = {};
  int64_t channels = 3, height = 5, width = 5;
  // (name, value): every node attribute of that name holds that value (Conv's group, say).
  std::vector<std::pair<std::string, int64_t>> int_attrs = {};
  // A model of nn:: modules to export instead (forward and params unused) when the op is
  // reached through a module (nn::Conv2d with groups, say).
  std::function<std::shared_ptr<nn::Module>()> model = nullptr;
};

struct OpCases {
  std::vector<SampleCase> samples;
  std::vector<ErrorCase> errors;
  std::vector<GoldenCase> goldens;
  std::vector<CustomCheck> checks;
  std::vector<OnnxCase> onnx;
  const char* no_bf16 = nullptr;  // why the op has no Bf16 check
  // Why an exportable op (its record has an ONNX mapping) has no round trip.
  const char* no_onnx_round_trip = nullptr;
  // Why a differentiable op has no PyTorch golden (neither golden cases nor a custom
  // "PyTorchGoldenFloat64" check): dropout's mask is drawn from hpcnet's generator, not torch's.
  const char* no_golden = nullptr;
};

// ---- building cases ----
namespace cases {

// OpCases::no_bf16 of every op whose kernels have no bfloat16 path (all but the convolutions').
inline constexpr char kNoBf16[] =
    "its kernels compute in the input's dtype, float32 or float64 (src/ops/float_dispatch.h); "
    "bfloat16 serves convolutions only (ops::set_conv_precision)";

// Zero-filled tensors of a shape, dtype and device (targets of zeros are valid class 0).
inline Tensor f32(const Shape& s, Device d) { return Tensor::zeros(s, DType::kFloat32, d); }
inline Tensor f64(const Shape& s, Device d) { return Tensor::zeros(s, DType::kFloat64, d); }
inline Tensor i64(const Shape& s, Device d) { return Tensor::zeros(s, DType::kInt64, d); }
inline Tensor u8(const Shape& s, Device d) { return Tensor::zeros(s, DType::kUInt8, d); }
// A target (N, H, W) or (N,) of zeros with one value changed.
inline Tensor labels_with(const Shape& s, int64_t at, int64_t value, Device d) {
  Tensor t = Tensor::zeros(s, DType::kInt64);
  t.data<int64_t>()[at] = value;
  return t.to(d);
}
inline const Tensor kNone;  // an undefined tensor

inline ErrorCase err(std::string what, std::function<Tensor(Device)> call,
                     std::vector<std::string> message) {
  return ErrorCase{
      std::move(what), std::move(call), std::move(message), true, {}, std::nullopt, false};
}
inline ErrorCase err_label(std::string what, std::function<Tensor(Device)> call,
                           std::vector<std::string> message) {
  return ErrorCase{
      std::move(what), std::move(call), std::move(message), true, {}, std::nullopt, true};
}
inline ErrorCase ok(std::string what, std::function<Tensor(Device)> call, Shape shape) {
  return ErrorCase{std::move(what),  std::move(call), {},   false,
                   std::move(shape), std::nullopt,    false};
}
inline ErrorCase ok_value(std::string what, std::function<Tensor(Device)> call, double value) {
  return ErrorCase{std::move(what), std::move(call), {}, false, Shape{}, value, false};
}

// Normal samples in float64 on the CPU, times scale.
inline Tensor randn64(const Shape& s, Rng& rng, double scale = 1.0) {
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * scale;
  return t;
}
// A constant of a call beside its input ref: a floating-point one in ref's dtype, any on ref's
// device, so one sample serves float64 on the CPU and float32 on a GPU.
inline Tensor like(const Tensor& constant, const Tensor& ref) {
  Tensor t = constant.dtype() == DType::kFloat64 || constant.dtype() == DType::kFloat32
                 ? constant.to(ref.dtype())
                 : constant;
  return t.to(ref.device());
}

}  // namespace cases

// ---- helpers of the kernel-level checks (defined in tests/ops/op_checks.cpp) ----
namespace case_checks {

extern const DType kFloatTypes[2];  // float32, float64
Device gpu_device();                // cuda:0
// Normal samples drawn in float64, then converted to t (on the CPU).
Tensor randn(const Shape& s, Rng& rng, DType t = DType::kFloat32);
Tensor gpu(const Tensor& t);  // t on cuda:0 (an undefined tensor stays undefined)
Tensor nan_gpu(const Shape& s, DType t);
Tensor nan_cpu(const Shape& s, DType t);
double tol_for(DType t);  // CUDA against CPU: 1e-4 for float32, 1e-10 for float64
// |cuda - cpu| <= tol (1 + |cpu|) elementwise, NaN nowhere (gtest assertions).
void expect_close(const Tensor& on_gpu, const Tensor& on_cpu, double tol, const std::string& what);
void expect_equal_ints(const Tensor& on_gpu, const Tensor& on_cpu, const std::string& what);
// The golden comparison of GoldenCase on a fixture file in tests/golden/ (its call given the
// inputs, then the constants); returns the largest absolute difference.
double check_golden(const std::string& file, const GoldenCase& c);
// An entry of a fixture file in tests/golden/.
Tensor golden_entry(const std::string& file, const std::string& name);
// |got - want| <= abs_tol + rel_tol |want| elementwise.
void expect_near_all(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol,
                     const std::string& what);

}  // namespace case_checks
}  // namespace hpcnet::ops

namespace hpcnet::op_cases {

#define HPCNET_DECLARE_OP_CASES(NAME) ::hpcnet::ops::OpCases NAME();
HPCNET_OP_TABLE(HPCNET_DECLARE_OP_CASES)
HPCNET_OP_TABLE_NO_GRAD(HPCNET_DECLARE_OP_CASES)
#undef HPCNET_DECLARE_OP_CASES

struct Entry {
  const char* name;
  ::hpcnet::ops::OpCases (*cases)();
  bool differentiable;  // in HPCNET_OP_TABLE (so it needs a finite-difference sample)
};

// Every op's cases, in table order, then the ops without a gradient.
inline const Entry kAll[] = {
#define HPCNET_OP_CASES_ENTRY(NAME) {::hpcnet::op_name::NAME, &NAME, true},
    HPCNET_OP_TABLE(HPCNET_OP_CASES_ENTRY)
#undef HPCNET_OP_CASES_ENTRY
#define HPCNET_OP_CASES_ENTRY(NAME) {::hpcnet::op_name::NAME, &NAME, false},
        HPCNET_OP_TABLE_NO_GRAD(HPCNET_OP_CASES_ENTRY)
#undef HPCNET_OP_CASES_ENTRY
};

}  // namespace hpcnet::op_cases
