// ONNX export: files read back through the ONNX library itself (onnx_proto parses, onnx::checker
// checks with full shape inference), nodes and initializers compared with the model, refusals.
// Numbers: tests/export/onnx_eval.h runs the exported YOLOv8 graph from the ONNX specification;
// agreement with onnxruntime (and with Ultralytics) is checked by tests/export/onnx/check_onnx.py
// and check_yolo_onnx.py (run by hand).
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cstring>
#include <fstream>

#include "hpcnet/export.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "test_util.h"
#include "tests/export/onnx_check.h"
#include "tests/export/onnx_eval.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

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

std::map<std::string, std::string> metadata(const onnx::ModelProto& m) {
  std::map<std::string, std::string> meta;
  for (const auto& e : m.metadata_props()) meta[e.key()] = e.value();
  return meta;
}

// yolov8n (3 classes, 64 px) exported through the detect task: Ultralytics' output layout (N, 4 +
// nc, anchors) with the DFL and the box decoding in the graph; the graph, run by the reference
// interpreter, gives what hpcnet's inference path (folded convolutions, host decoding) gives.
TEST(Export, Yolov8nDecodedOutputRunsAsHpcnetPredicts) {
  TempDir dir("export_yolo");
  manual_seed(3);
  auto model = nn::make_model("yolov8n", nn::ModelOptions{3});
  // Batch-norm statistics off their initial 0 / 1, so that an unfolded or misread one shows.
  Rng rng(5);
  for (auto& [name, t] : model->named_buffers())
    if (name.find("running_") != std::string::npos) {
      float* p = t.data<float>();
      const bool var = name.find("running_var") != std::string::npos;
      for (int64_t i = 0; i < t.numel(); ++i)
        p[i] = var ? rng.uniform(0.5f, 1.5f) : rng.uniform(-0.2f, 0.2f);
    }
  task::TaskOptions to;
  to.imgsz = 64;
  const auto det = task::make_task("detect", to);
  exporting::OnnxOptions o;
  o.batch = 2;
  o.dynamic_batch = true;
  o.height = o.width = 64;
  o.task = "detect";
  o.classes = {"cat", "dog", "bird"};
  o.output = [&](nn::Module& mod, const Tensor& x) { return det->export_output(mod, x); };
  o.metadata = det->export_metadata();
  const fs::path file = dir / "yolo.onnx";
  const exporting::OnnxResult r = exporting::export_onnx(*model, o, file.string());
  onnx::ModelProto m = read_model(file);
  EXPECT_EQ(check(m), "");
  // 64 px: 8 x 8 + 4 x 4 + 2 x 2 = 84 anchors; rows x, y, w, h and three class scores.
  EXPECT_EQ(dims(m.graph().output(0)), (std::vector<int64_t>{-1, 7, 84}));
  ASSERT_EQ(r.sample_output.shape(), (Shape{2, 7, 84}));
  int64_t convs = 0;  // Conv + BatchNorm + SiLU blocks
  for (const auto& [name, t] : model->named_parameters())
    convs += name.size() > 10 && name.substr(name.size() - 10) == ".bn.weight";
  EXPECT_EQ(convs, 57);
  const auto ops = op_types(m);
  EXPECT_EQ(count(ops, "Conv"), convs + 6);  // and the head's six output convolutions
  EXPECT_EQ(count(ops, "BatchNormalization"), convs);
  EXPECT_EQ(count(ops, "Sigmoid"), convs + 1);  // SiLU = x sigmoid(x); the class scores
  EXPECT_EQ(count(ops, "Softmax"), 1);          // the DFL over 16 bins
  EXPECT_EQ(count(ops, "ReduceSum"), 1);
  EXPECT_EQ(std::set<std::string>(ops.begin(), ops.end()),
            (std::set<std::string>{"Add", "BatchNormalization", "Concat", "Conv", "MaxPool", "Mul",
                                   "ReduceSum", "Reshape", "Resize", "Sigmoid", "Slice", "Softmax",
                                   "Sub"}));
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : m.graph().initializer()) inits[t.name()] = &t;
  ASSERT_TRUE(inits.count("anchors") && inits.count("strides"));
  EXPECT_EQ(std::vector<int64_t>(inits["anchors"]->dims().begin(), inits["anchors"]->dims().end()),
            (std::vector<int64_t>{1, 2, 84}));
  const std::map<std::string, std::string> meta = metadata(m);
  EXPECT_EQ(meta.at("task"), "detect");
  EXPECT_EQ(meta.at("stride"), "32");
  EXPECT_EQ(meta.at("names"), "{0: 'cat', 1: 'dog', 2: 'bird'}");
  EXPECT_EQ(meta.at("normalize"), "x / 255, x: RGB pixels 0..255 (N, 3, H, W)");
  EXPECT_EQ(meta.at("mean"), "[0, 0, 0]");
  EXPECT_EQ(meta.at("std"), "[1, 1, 1]");
  // The traced input is pixels / 255; hpcnet's inference path (folded) predicts the same.
  const float* px = r.sample_input.data<float>();
  EXPECT_GE(*std::min_element(px, px + r.sample_input.numel()), 0.f);
  EXPECT_LT(*std::max_element(px, px + r.sample_input.numel()), 1.f);
  Tensor want;
  {
    NoGradGuard ng;
    want = det->export_output(*model, r.sample_input);
  }
  EXPECT_LT(rel_err(want, r.sample_output), 1e-5);
  // The graph itself, run from the ONNX specification on the traced input.
  test_util::onnx_eval::Value in;
  in.dims = r.sample_input.shape();
  in.f.assign(px, px + r.sample_input.numel());
  const auto out = test_util::onnx_eval::run(m, in).at("output");
  ASSERT_EQ(out.dims, (std::vector<int64_t>{2, 7, 84}));
  const float* w = r.sample_output.data<float>();
  double box = 0, score = 0, largest = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t row = 0; row < 7; ++row)
      for (int64_t a = 0; a < 84; ++a) {
        const int64_t e = (b * 7 + row) * 84 + a;
        const double d = std::abs(out.f[static_cast<size_t>(e)] - w[e]);
        (row < 4 ? box : score) = std::max(row < 4 ? box : score, d);
        largest = std::max(largest, static_cast<double>(std::abs(w[e])));
      }
  EXPECT_GT(largest, 32.0);  // boxes in pixels
  EXPECT_LT(box, 1e-4 * largest);
  EXPECT_LT(score, 1e-5);
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
  // LeNet's input is normalised as CIFAR-10's tutorial does; the file says so.
  EXPECT_NE(r.out.find("input: (x / 255 - mean) / std, x: RGB pixels 0..255 (N, 3, H, W); "
                       "output (N, 10)"),
            std::string::npos)
      << r.out;
  const auto meta = metadata(read_model(dir / "model.onnx"));
  EXPECT_EQ(meta.at("normalize"), "(x / 255 - mean) / std, x: RGB pixels 0..255 (N, 3, H, W)");
  EXPECT_EQ(meta.at("mean"), "[0.5, 0.5, 0.5]");
  EXPECT_EQ(meta.at("std"), "[0.5, 0.5, 0.5]");
  SafetensorsFile io = load_safetensors((dir / "io.safetensors").string());
  EXPECT_EQ(io.tensors.at("input").shape(), (Shape{1, 3, 32, 32}));
  EXPECT_EQ(io.tensors.at("output").shape(), (Shape{1, 10}));
  // The traced input: uniform pixels normalised, so in [-1, 1).
  EXPECT_LE(max_abs(io.tensors.at("input")), 1.0);
  // A detection model exports through its task: decoded (N, 4 + nc, anchors), pixels / 255.
  auto yolo = nn::make_model("yolov8n", nn::ModelOptions{2});
  train::ModelMeta ym;
  ym.model = "yolov8n";
  ym.task = "detect";
  ym.classes = {"a", "b"};
  ym.imgsz = 64;
  train::save_model((dir / "yolo.safetensors").string(), *yolo, ym);
  r = run_hpcnet({"export", "--weights", "yolo.safetensors"}, dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("input: x / 255, x: RGB pixels 0..255 (N, 3, H, W); output (N, 6, 84)"),
            std::string::npos)
      << r.out;
  const onnx::ModelProto ymodel = read_model(dir / "yolo.onnx");
  EXPECT_EQ(check(ymodel), "");
  EXPECT_EQ(metadata(ymodel).at("task"), "detect");
  // --imgsz HEIGHT,WIDTH (Ultralytics' imgsz=[h, w]): a 32x64 input has 42 anchors, not 84.
  r = run_hpcnet({"export", "--weights", "yolo.safetensors", "--imgsz", "32,64", "--out",
                  "rect.onnx"},
                 dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("input (1, 3, 32, 64)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output (N, 6, 42)"), std::string::npos) << r.out;
  EXPECT_EQ(metadata(read_model(dir / "rect.onnx")).at("imgsz"), "[32, 64]");
  expect_refused(
      run_hpcnet({"export", "--weights", "yolo.safetensors", "--imgsz", "32,0"}, dir.path()),
      "--imgsz 32,0", {"--imgsz: expected a positive size or HEIGHT,WIDTH"});
  expect_refused(
      run_hpcnet({"export", "--weights", "model.safetensors", "--format", "tflite"}, dir.path()),
      "--format tflite", {"--format tflite: only onnx is supported"});
  expect_refused(
      run_hpcnet({"export", "--weights", "model.safetensors", "--batch", "0"}, dir.path()),
      "--batch 0", {"--batch 0: expected a batch size >= 1 or 'dynamic'"});
  expect_refused(run_hpcnet({"export", "--weights", "missing.safetensors"}, dir.path()), "no file",
                 {"missing.safetensors"});
}

namespace {
// A model ending in a loss.
struct LossNet : nn::Module {
  Tensor forward(const Tensor& x) override { return F::bce_with_logits(F::relu(x), F::sigmoid(x)); }
};

}  // namespace

// An op whose record says it is not exportable is refused with the record's reason.
TEST(Export, RefusesAnOpThatIsNotExportableWithItsReason) {
  TempDir dir("export_loss");
  LossNet model;
  EXPECT_TRUE(input_error([&] { exporting::export_onnx(model, {}, (dir / "x.onnx").string()); },
                          "export: op 'bce_with_logits' is not exportable: a piece of the "
                          "detection loss"));
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}
