// The generic runner of the ops' test cases (src/ops/op_cases.h; each op's in
// src/ops/<family>/test_cases.cpp): one gtest per op and kind of check, Ops/<op>.<Check>
// (ggml's test-backend-ops -o OP), registered at start-up from op_cases::kAll, and the checks
// that every op has the cases it needs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/export.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/op_cases.h"
#include "src/ops/op_record.h"
#include "test_paths.h"
#include "test_util.h"
#include "tests/export/onnx_check.h"
#include "tests/export/onnx_eval.h"
#include "tests/ops/op_tests.h"

using namespace hpcnet;
using ops::OpCases;

// ---- helpers shared with the kernel-level checks of the op folders ----
namespace hpcnet::ops::case_checks {

const DType kFloatTypes[2] = {DType::kFloat32, DType::kFloat64};

Device gpu_device() { return cuda_device(0); }

Tensor randn(const Shape& s, Rng& rng, DType t) { return cases::randn64(s, rng).to(t); }

Tensor gpu(const Tensor& t) { return t.defined() ? t.to(gpu_device()) : t; }
Tensor nan_gpu(const Shape& s, DType t) { return Tensor::full(s, NAN, t, gpu_device()); }
Tensor nan_cpu(const Shape& s, DType t) { return Tensor::full(s, NAN, t); }

double tol_for(DType t) { return t == DType::kFloat64 ? 1e-10 : 1e-4; }

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

namespace {
// Also returns the largest |got - want| in *worst when given.
void near_all(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol,
              const std::string& what, double* worst_out) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_vector_f64(), b = want.to_vector_f64();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = abs_tol + rel_tol * std::abs(b[i]);
    worst = std::max(worst, std::abs(a[i] - b[i]));
    ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
  }
  if (worst_out) *worst_out = std::max(*worst_out, worst);
}

const SafetensorsFile& golden_file(const std::string& file) {
  static std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  auto& f = files[file];
  if (!f)
    f = std::make_unique<SafetensorsFile>(
        load_safetensors(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/" + file));
  return *f;
}
}  // namespace

void expect_near_all(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol,
                     const std::string& what) {
  near_all(got, want, abs_tol, rel_tol, what, nullptr);
}

Tensor golden_entry(const std::string& file, const std::string& name) {
  return golden_file(file).at(name);
}

double check_golden(const std::string& file, const GoldenCase& c) {
  const SafetensorsFile& g = golden_file(file);
  std::vector<Tensor> in;
  for (auto& n : c.inputs) {
    Tensor t = g.at(c.prefix + "." + n).clone();
    if (t.dtype() == DType::kFloat64) t.set_requires_grad(true);
    in.push_back(t);
  }
  std::vector<Tensor> args = in;
  for (auto& n : c.constants) args.push_back(g.at(c.prefix + "." + n));
  double worst = 0;
  Tensor y = c.call(args);
  near_all(y, g.at(c.prefix + ".y"), 1e-10, 1e-10, c.prefix + ".y", &worst);
  y.backward(g.at(c.prefix + ".dy"));
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype() != DType::kFloat64) continue;
    near_all(in[i].grad(), g.at(c.prefix + ".d" + c.inputs[i]), 1e-10, 1e-10,
             c.prefix + ".d" + c.inputs[i], &worst);
  }
  return worst;
}

}  // namespace hpcnet::ops::case_checks

namespace {

using namespace hpcnet::ops::case_checks;

// Each op's cases, built once.
const OpCases& cases_of(const op_cases::Entry& e) {
  static std::map<std::string, std::unique_ptr<OpCases>> built;
  auto& c = built[e.name];
  if (!c) c = std::make_unique<OpCases>(e.cases());
  return *c;
}

// ---- GradcheckFloat64 ----

// L(inputs) = sum(f(inputs) * r), evaluated without autograd.
double weighted_sum(const ops::CaseCall& f, const std::vector<Tensor>& in, const Tensor& r) {
  NoGradGuard ng;
  Tensor y = f(in);
  std::vector<double> yv = y.to_vector_f64(), rv = r.to_vector_f64();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += yv[i] * rv[i];
  return s;
}

// Checks every floating-point input of f; integer inputs (targets) are passed through.
void gradcheck(const std::string& label, const ops::CaseCall& f, std::vector<Tensor> inputs,
               uint64_t seed) {
  Rng rng(seed, 99);
  for (auto& t : inputs)
    if (t.dtype() == DType::kFloat64) t.set_requires_grad(true);
  Tensor y = f(inputs);
  Tensor r = ops::cases::randn64(y.shape(), rng);
  y.backward(r);
  const double h = 1e-6;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (x.dtype() != DType::kFloat64) continue;
    ASSERT_TRUE(x.grad().defined()) << label << ": no gradient for input " << k;
    std::vector<double> analytic = x.grad().to_vector_f64();
    double* px = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = px[i];
      px[i] = orig + h;
      double lp = weighted_sum(f, inputs, r);
      px[i] = orig - h;
      double lm = weighted_sum(f, inputs, r);
      px[i] = orig;
      double numeric = (lp - lm) / (2 * h);
      ASSERT_NEAR(analytic[i], numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << label << ": input " << k << " element " << i;
    }
  }
}

// The inputs of a sample: an Rng seeded by its label.
std::vector<Tensor> sample_inputs(const ops::SampleCase& s) {
  Rng rng(std::hash<std::string>{}(s.label), 1);
  return s.inputs(rng);
}

void run_gradchecks(const OpCases& c) {
  for (const ops::SampleCase& s : c.samples) {
    if (!(s.checks & ops::kCheckGrad)) continue;
    SCOPED_TRACE(s.label);
    gradcheck(s.label, s.call, sample_inputs(s), 7);
    if (testing::Test::HasFatalFailure()) return;  // stop at the op's first failing element
  }
}

// ---- ErrorInputsCpu, ErrorInputsCuda ----

// Runs one error case on a device; a failure names the op, the case and what happened instead.
void run_error_case(const std::string& op, const ops::ErrorCase& row, Device d) {
  SCOPED_TRACE(op + ": " + row.what + " on " + d.str());
  std::string caught;  // the hpcnet error's message, or "" when the call returned
  Tensor y;
  try {
    y = row.call(d);
    if (d.is_cuda()) cuda_synchronize(d);  // device-side input errors surface here
  } catch (const Error& e) {               // InputError or Error
    caught = e.what();
    if (caught.empty()) caught = "(empty message)";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "untyped exception (not an hpcnet error): " << e.what();
    return;
  } catch (...) {
    ADD_FAILURE() << "a non-std exception";
    return;
  }
  if (!row.expect_error) {
    ASSERT_TRUE(caught.empty()) << "expected a result, got the error: " << caught;
    ASSERT_TRUE(y.defined()) << "the result is undefined";
    if (row.value) {
      ASSERT_EQ(y.numel(), 1) << "expected a 0-d result, got " << shape_str(y.shape());
      const double v = y.item();
      if (std::isnan(*row.value))
        EXPECT_TRUE(std::isnan(v)) << "expected NaN, got " << v;
      else
        EXPECT_EQ(v, *row.value);
    } else {
      EXPECT_EQ(y.shape(), row.result_shape)
          << "got " << shape_str(y.shape()) << ", expected " << shape_str(row.result_shape);
      EXPECT_TRUE(y.device() == d) << "the result is on " << y.device().str();
    }
    return;
  }
  ASSERT_FALSE(caught.empty()) << "expected an error, the call returned "
                               << (y.defined() ? shape_str(y.shape()) : "an undefined tensor");
  if (!(d.is_cuda() && row.deferred_on_cuda))
    EXPECT_NE(caught.find(op), std::string::npos) << "the error does not name the op: " << caught;
  for (const std::string& part : row.message)
    EXPECT_NE(caught.find(part), std::string::npos)
        << "the error does not contain '" << part << "': " << caught;
}

// ---- CudaParity ----

// A sample through autograd on the CPU and on the GPU, in dtype t: the output and every
// floating-point input's gradient for a random output weighting.
void run_sample_parity(const ops::SampleCase& s, DType t) {
  const std::string tag = s.label + " " + dtype_name(t);
  const double tol = t == DType::kFloat32 ? s.parity_tol : tol_for(t);
  std::vector<Tensor> cpu_in, gpu_in;
  for (Tensor& x : sample_inputs(s)) {
    const bool is_float = x.dtype() == DType::kFloat64;
    Tensor c = is_float ? x.to(t).clone() : x;
    Tensor g = gpu(c);
    if (is_float) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor y = s.call(cpu_in), gy = s.call(gpu_in);
  expect_close(gy, y, tol, tag + " forward");
  if (testing::Test::HasFatalFailure()) return;
  Rng rng(std::hash<std::string>{}(s.label), 3);
  Tensor r = randn(y.shape(), rng, t);
  y.backward(r);
  gy.backward(gpu(r));
  for (size_t k = 0; k < cpu_in.size(); ++k)
    if (cpu_in[k].requires_grad())
      expect_close(gpu_in[k].grad(), cpu_in[k].grad(), tol, tag + " grad " + std::to_string(k));
}

void run_parity(const OpCases& c) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  for (DType t : kFloatTypes)
    for (const ops::SampleCase& s : c.samples)
      if (s.checks & ops::kCheckCudaParity) {
        SCOPED_TRACE(s.label);
        run_sample_parity(s, t);
      }
  for (const ops::CustomCheck& k : c.checks)
    if (k.check == "CudaParity") {
      SCOPED_TRACE(k.label);
      k.run();
    }
}

// ---- PyTorchGoldenFloat64 ----

void run_goldens(const OpCases& c) {
  for (const ops::GoldenCase& g : c.goldens) {
    SCOPED_TRACE(g.prefix);
    const double worst = check_golden(g.file, g);
    std::printf("[ golden   ] %-28s max |hpcnet - torch| = %.3g\n", g.prefix.c_str(), worst);
  }
  for (const ops::CustomCheck& k : c.checks)
    if (k.check == "PyTorchGoldenFloat64") {
      SCOPED_TRACE(k.label);
      k.run();
    }
}

// ---- OnnxRoundTrip ----

// The model of an ONNX case: its forward on the input, its parameters registered as p0, p1, ...
struct OnnxCaseModel : nn::Module {
  const ops::OnnxCase& c;
  std::vector<Tensor> params;
  explicit OnnxCaseModel(const ops::OnnxCase& onnx_case) : c(onnx_case) {
    if (!c.params) return;
    Rng rng(std::hash<std::string>{}(c.label), 4);
    for (Tensor& p : c.params(rng))
      params.push_back(register_parameter("p" + std::to_string(params.size()), p));
  }
  Tensor forward(const Tensor& x) override { return c.forward(x, params); }
};

void run_onnx_case(const ops::OnnxCase& c) {
  test_util::TempDir dir("op_onnx");
  std::shared_ptr<nn::Module> model = c.model ? c.model() : std::make_shared<OnnxCaseModel>(c);
  model->eval();
  exporting::OnnxOptions o;
  o.channels = c.channels;
  o.height = c.height;
  o.width = c.width;
  const std::string file = (dir.path() / "op.onnx").string();
  const exporting::OnnxResult r = exporting::export_onnx(*model, o, file);
  onnx::ModelProto m = test_util::read_model(file);
  EXPECT_EQ(test_util::check(m), "");
  const std::vector<std::string> types = test_util::op_types(m);
  for (const auto& [type, n] : c.nodes) EXPECT_EQ(test_util::count(types, type), n) << type;
  for (const auto& [name, value] : c.int_attrs)
    for (const auto& node : m.graph().node())
      for (const auto& a : node.attribute())
        if (a.name() == name) EXPECT_EQ(a.i(), value) << node.op_type() << " " << name;
  test_util::onnx_eval::Value in;
  in.dims = r.sample_input.shape();
  const float* px = r.sample_input.data<float>();
  in.f.assign(px, px + r.sample_input.numel());
  const auto out = test_util::onnx_eval::run(m, in).at("output");
  ASSERT_EQ(out.dims, r.sample_output.shape());
  const float* want = r.sample_output.data<float>();
  double worst = 0;
  for (size_t i = 0; i < out.f.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(out.f[i] - want[i])));
  EXPECT_LT(worst, 1e-5);
}

bool has_custom(const OpCases& c, const std::string& check) {
  for (const ops::CustomCheck& k : c.checks)
    if (k.check == check) return true;
  return false;
}

bool has_sample(const OpCases& c, unsigned check) {
  for (const ops::SampleCase& s : c.samples)
    if (s.checks & check) return true;
  return false;
}

// Registers Ops/<op>.<Check> for every check the op's cases feed.
const bool kOpChecksRegistered = [] {
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    const std::string op = e.name;
    auto reg = [&](const std::string& check, std::function<void()> body) {
      test_util::register_op_check(op, check, std::move(body), __FILE__, __LINE__);
    };
    if (has_sample(c, ops::kCheckGrad)) reg("GradcheckFloat64", [&c] { run_gradchecks(c); });
    if (!c.errors.empty()) {
      reg("ErrorInputsCpu", [&c, op] {
        for (const ops::ErrorCase& row : c.errors) run_error_case(op, row, cpu_device());
      });
      reg("ErrorInputsCuda", [&c, op] {
        if (!cuda_available())
          GTEST_SKIP() << "the CUDA rows need a CUDA device: " << cuda_unavailable_reason();
        for (const ops::ErrorCase& row : c.errors) run_error_case(op, row, cuda_device(0));
      });
    }
    if (has_sample(c, ops::kCheckCudaParity) || has_custom(c, "CudaParity"))
      reg("CudaParity", [&c] { run_parity(c); });
    if (!c.goldens.empty() || has_custom(c, "PyTorchGoldenFloat64"))
      reg("PyTorchGoldenFloat64", [&c] { run_goldens(c); });
    if (!c.onnx.empty())
      reg("OnnxRoundTrip", [&c] {
        for (const ops::OnnxCase& k : c.onnx) {
          SCOPED_TRACE(k.label);
          run_onnx_case(k);
        }
      });
    std::set<std::string> others;
    for (const ops::CustomCheck& k : c.checks)
      if (k.check != "CudaParity" && k.check != "PyTorchGoldenFloat64") others.insert(k.check);
    for (const std::string& check : others)
      reg(check, [&c, check] {
        for (const ops::CustomCheck& k : c.checks)
          if (k.check == check) {
            SCOPED_TRACE(k.label);
            k.run();
          }
      });
  }
  return true;
}();

}  // namespace

// ---- every op has the cases it needs ----

TEST(Gradcheck, EveryOpInTheTableHasACase) {
  for (const op_cases::Entry& e : op_cases::kAll)
    if (e.differentiable)
      EXPECT_TRUE(has_sample(cases_of(e), ops::kCheckGrad))
          << "op '" << e.name << "' has no gradient check (a sample with kCheckGrad in its "
          << "test_cases.cpp)";
  // The op table and the records name the same ops.
  std::set<std::string> records;
  for (const ops::OpRecord* r : op_record::kAll) records.insert(r->name);
  for (const op_cases::Entry& e : op_cases::kAll)
    EXPECT_EQ(records.count(e.name), e.differentiable ? 1u : 0u) << e.name;
}

TEST(OpErrors, EveryOpHasAtLeastThreeRows) {
  for (const op_cases::Entry& e : op_cases::kAll)
    EXPECT_GE(cases_of(e).errors.size(), 3u)
        << "op '" << e.name << "' needs at least 3 error cases in its test_cases.cpp";
}

TEST(CudaParity, EveryOpInTheTableHasAParityTest) {
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    EXPECT_TRUE(has_sample(c, ops::kCheckCudaParity) || has_custom(c, "CudaParity"))
        << "op '" << e.name << "' has no CUDA parity check in its test_cases.cpp";
  }
}

TEST(OpCases, EveryOpHasABf16CheckOrSaysWhyNot) {
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    EXPECT_NE(has_custom(c, "Bf16"), c.no_bf16 != nullptr)
        << "op '" << e.name << "': a Bf16 check or OpCases::no_bf16 (one of the two)";
  }
}

// The op table says for every op whether it has a bfloat16 CUDA kernel: the ops with a CPU bf16
// path (a Bf16 check) have one and its check (CudaBf16, run on a GPU); the others' no_bf16 reason
// holds for both devices (their kernels compute in the input's dtype everywhere).
TEST(OpCases, EveryBf16OpHasACudaBf16Check) {
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    EXPECT_EQ(has_custom(c, "CudaBf16"), has_custom(c, "Bf16"))
        << "op '" << e.name << "': a Bf16 check and a CudaBf16 check go together";
  }
}

TEST(OpCases, EveryDifferentiableOpHasAPyTorchGoldenOrSaysWhyNot) {
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    const bool golden = !c.goldens.empty() || has_custom(c, "PyTorchGoldenFloat64");
    if (e.differentiable)
      EXPECT_NE(golden, c.no_golden != nullptr)
          << "op '" << e.name << "': PyTorch goldens (OpCases::goldens, from "
          << "tests/golden/make_golden.py) or OpCases::no_golden (one of the two)";
    else
      EXPECT_FALSE(golden && c.no_golden != nullptr)
          << "op '" << e.name << "': PyTorch goldens and OpCases::no_golden both";
  }
}

TEST(OpCases, EveryExportableOpHasAnOnnxRoundTripOrSaysWhyNot) {
  std::map<std::string, const ops::OpRecord*> records;
  for (const ops::OpRecord* r : op_record::kAll) records[r->name] = r;
  for (const op_cases::Entry& e : op_cases::kAll) {
    const OpCases& c = cases_of(e);
    const bool exportable = records.count(e.name) && records[e.name]->onnx.emit != nullptr;
    if (exportable)
      EXPECT_NE(c.onnx.empty(), c.no_onnx_round_trip == nullptr)
          << "op '" << e.name << "': ONNX cases or OpCases::no_onnx_round_trip (one of the two)";
    else
      EXPECT_TRUE(c.onnx.empty() && c.no_onnx_round_trip == nullptr)
          << "op '" << e.name << "' is not exportable (its record says why): no ONNX cases";
  }
}
