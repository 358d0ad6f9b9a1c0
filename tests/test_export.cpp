// ONNX export: files read back through the ONNX library itself (onnx_proto parses, onnx::checker
// checks with full shape inference), nodes and initializers compared with the model, refusals.
// Numerical agreement with onnxruntime is checked by tests/onnx/check_onnx.py (run by hand).
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cstring>
#include <fstream>

#include "hpcnet/export.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/train.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

onnx::ModelProto read_model(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

std::vector<std::string> op_types(const onnx::ModelProto& m) {
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node()) ops.push_back(n.op_type());
  return ops;
}

int count(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<int>(std::count(v.begin(), v.end(), s));
}

// Runs the checker with strict shape inference; "" when the model passes.
std::string check(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions{true, 1, true});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<int64_t> dims(const onnx::ValueInfoProto& v) {
  std::vector<int64_t> d;
  for (const auto& x : v.type().tensor_type().shape().dim())
    d.push_back(x.has_dim_param() ? -1 : x.dim_value());
  return d;
}

}  // namespace

TEST(Export, LeNetNodesAndInitializersMatchTheModel) {
  TempDir dir("export_lenet");
  manual_seed(1);
  auto model = nn::make_model("lenet");
  exporting::OnnxOptions o;
  o.model_name = "lenet";
  o.classes = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  const fs::path file = dir / "lenet.onnx";
  exporting::OnnxResult r = exporting::export_onnx(*model, o, file.string());
  onnx::ModelProto m = read_model(file);
  EXPECT_EQ(check(m), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(op_types(m),
            (std::vector<std::string>{"Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool",
                                      "Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm"}));
  // Every parameter is an initializer under its state_dict name with the same float32 bytes.
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : m.graph().initializer()) inits[t.name()] = &t;
  const auto params = model->named_parameters();
  ASSERT_EQ(inits.size(), params.size());
  int64_t elements = 0;
  for (const auto& [name, t] : params) {
    ASSERT_TRUE(inits.count(name)) << name;
    const onnx::TensorProto& p = *inits[name];
    EXPECT_EQ(std::vector<int64_t>(p.dims().begin(), p.dims().end()), t.shape()) << name;
    ASSERT_EQ(p.raw_data().size(), t.nbytes()) << name;
    EXPECT_EQ(std::memcmp(p.raw_data().data(), t.contiguous().raw_data(), t.nbytes()), 0) << name;
    elements += t.numel();
  }
  EXPECT_EQ(r.parameters, elements);
  EXPECT_EQ(r.nodes, 12);
  EXPECT_EQ(dims(m.graph().input(0)), (std::vector<int64_t>{1, 3, 32, 32}));
  EXPECT_EQ(dims(m.graph().output(0)), (std::vector<int64_t>{1, 10}));
  EXPECT_EQ(m.graph().output(0).name(), "output");
  // The sample output is the model's own forward of the sample input.
  model->eval();
  NoGradGuard ng;
  EXPECT_TRUE(same_bytes(model->forward(r.sample_input), r.sample_output));
  std::map<std::string, std::string> meta;
  for (const auto& e : m.metadata_props()) meta[e.key()] = e.value();
  EXPECT_EQ(meta["model"], "lenet");
  EXPECT_EQ(meta["task"], "classify");
  EXPECT_EQ(meta["names"].substr(0, 16), "{0: 'a', 1: 'b',");
}

TEST(Export, ResNet20WithBatchNormAndOptionAShortcutsChecks) {
  TempDir dir("export_resnet20");
  auto model = nn::make_model("resnet20");
  exporting::OnnxOptions o;
  o.batch = 2;
  o.dynamic_batch = true;
  const fs::path file = dir / "r20.onnx";
  exporting::export_onnx(*model, o, file.string());
  onnx::ModelProto m = read_model(file);
  EXPECT_EQ(check(m), "");
  const auto ops = op_types(m);
  EXPECT_EQ(count(ops, "Conv"), 19);
  EXPECT_EQ(count(ops, "BatchNormalization"), 19);
  EXPECT_EQ(count(ops, "Add"), 9);    // one per basic block
  EXPECT_EQ(count(ops, "Slice"), 2);  // the two option-A shortcuts (stride 2, padded channels)
  EXPECT_EQ(count(ops, "Pad"), 2);
  EXPECT_EQ(count(ops, "GlobalAveragePool"), 1);
  EXPECT_EQ(dims(m.graph().input(0)), (std::vector<int64_t>{-1, 3, 32, 32}));
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(dims(m.graph().output(0)), (std::vector<int64_t>{-1, 10}));
  // The running statistics are initializers too (eval-mode batch norm reads them).
  bool has_running = false;
  for (const auto& t : m.graph().initializer()) has_running |= t.name() == "bn1.running_var";
  EXPECT_TRUE(has_running);
}

TEST(Export, UnetWithResizeAndConcatChecks) {
  TempDir dir("export_unet");
  nn::ModelOptions mo;
  mo.num_classes = 3;
  auto model = nn::make_model("unet_resnet18", mo);
  exporting::OnnxOptions o;
  o.height = o.width = 64;
  o.task = "segment";
  const fs::path file = dir / "unet.onnx";
  exporting::OnnxResult r = exporting::export_onnx(*model, o, file.string());
  onnx::ModelProto m = read_model(file);
  EXPECT_EQ(check(m), "");
  const auto ops = op_types(m);
  EXPECT_EQ(count(ops, "Resize"), 5);
  EXPECT_EQ(count(ops, "Concat"), 4);
  EXPECT_EQ(dims(m.graph().output(0)), (std::vector<int64_t>{1, 3, 64, 64}));
  EXPECT_EQ(r.sample_output.shape(), (Shape{1, 3, 64, 64}));
}

namespace {
// Adds a tensor made outside the op table: the exporter cannot know where it came from.
struct OutsideOpTable : nn::Module {
  Tensor forward(const Tensor& x) override {
    Tensor bias = Tensor::zeros(x.shape());
    return F::relu(F::add(x, bias));
  }
};
}  // namespace

TEST(Export, RefusesTensorsFromOutsideTheOpTable) {
  TempDir dir("export_refuse");
  OutsideOpTable model;
  EXPECT_TRUE(input_error(
      [&] { exporting::export_onnx(model, {}, (dir / "x.onnx").string()); },
      "add reads a tensor (1, 3, 32, 32) that no exported op, parameter or buffer produced"));
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}

TEST(Export, CommandWritesTheFileAndRefusesBadOptions) {
  TempDir dir("export_cli");
  auto model = nn::make_model("lenet");
  train::save_model((dir / "model.safetensors").string(), *model, "lenet",
                    {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, 0);
  RunResult r = run_hpcnet({"export", "--weights", "model.safetensors", "--batch", "dynamic",
                            "--save-io", "io.safetensors"},
                           dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("model.onnx: lenet, opset 17, input (batch, 3, 32, 32), 12 nodes, 62006 "
                       "parameters"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(check(read_model(dir / "model.onnx")), "");
  SafetensorsFile io = load_safetensors((dir / "io.safetensors").string());
  EXPECT_EQ(io.tensors.at("input").shape(), (Shape{1, 3, 32, 32}));
  EXPECT_EQ(io.tensors.at("output").shape(), (Shape{1, 10}));
  expect_refused(
      run_hpcnet({"export", "--weights", "model.safetensors", "--format", "tflite"}, dir.path()),
      "--format tflite", {"--format tflite: only onnx is supported"});
  expect_refused(
      run_hpcnet({"export", "--weights", "model.safetensors", "--batch", "0"}, dir.path()),
      "--batch 0", {"--batch 0: expected a batch size >= 1 or 'dynamic'"});
  expect_refused(run_hpcnet({"export", "--weights", "missing.safetensors"}, dir.path()), "no file",
                 {"missing.safetensors"});
}
