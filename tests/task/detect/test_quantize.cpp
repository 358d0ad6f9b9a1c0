// int8 post-training quantisation of YOLO models: calibration records each int8-capable Conv's
// input range, --precision int8 runs those Convs in int8 near the float32 outputs, the ranges
// travel in the model file (hpcnet.int8), and `hpcnet quantize` / `eval` / `predict --precision
// int8` from the command line, with their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "hpcnet/autograd.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/train.h"
#include "src/nn/models/models.h"
#include "src/nn/models/yolo.h"
#include "src/ops/ops.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// --precision int8 for a scope (bf16 for the other convolutions, as the CLI sets it).
class Int8Guard {
 public:
  Int8Guard() {
    ops::set_conv_precision(ops::Precision::kBFloat16);
    ops::set_int8_inference(true);
  }
  ~Int8Guard() {
    ops::set_int8_inference(false);
    ops::set_conv_precision(ops::Precision::kFloat32);
  }
  Int8Guard(const Int8Guard&) = delete;
  Int8Guard& operator=(const Int8Guard&) = delete;
};

// Largest |a - b| over the spread of b (its largest value minus its smallest): the head's biases
// make every output of a freshly initialised model about the same, and the spread is what its
// convolutions add.
double rel_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.contiguous().to_vector_f64(), vb = b.contiguous().to_vector_f64();
  double d = 0;
  for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::fabs(va[i] - vb[i]));
  const auto [lo, hi] = std::minmax_element(vb.begin(), vb.end());
  return d / std::max(*hi - *lo, 1e-12);
}

}  // namespace

TEST(Int8Yolo, CalibratedConvsRunInInt8NearFloat32) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512";
  auto model = nn::make_model("yolov8n", nn::ModelOptions{2});
  NoGradGuard no_grad;
  Rng rng(5, 0);
  std::vector<float> pixels(2 * 3 * 64 * 64);
  for (float& v : pixels) v = static_cast<float>(rng.uniform());
  const Tensor x = Tensor::from_vector(pixels, {2, 3, 64, 64});
  // A freshly initialised model's activations shrink layer by layer until its outputs are its
  // head's biases; BatchNorm's running statistics taken from this batch (momentum 1) keep every
  // layer's output at unit scale, as in a trained model.
  for (auto& [name, m] : model->named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) bn->momentum = 1.0;
  model->train();
  model->forward_all(x);
  model->eval();
  const nn::Outputs ref = model->forward_all(x);
  // Without a calibration --precision int8 changes nothing but the bf16 convolutions.
  EXPECT_TRUE(nn::int8_ranges(*model).empty());
  nn::set_int8_calibration(true);
  model->forward_all(x);
  nn::set_int8_calibration(false);
  const std::map<std::string, double> ranges = nn::int8_ranges(*model);
  // Every Conv but the stem (3 input channels): 57 - 1 in yolov8n (the Detect head's last 1x1
  // convolutions are plain Conv2d, not Conv).
  EXPECT_EQ(ranges.size(), 56u);
  EXPECT_EQ(ranges.count("model.0"), 0u);
  EXPECT_EQ(ranges.count("model.1"), 1u);
  EXPECT_EQ(ranges.count("model.2.cv1"), 1u);
  for (const auto& [name, v] : ranges) EXPECT_GT(v, 0) << name;
  nn::Outputs q;
  {
    Int8Guard int8;
    q = model->forward_all(x);
  }
  nn::Outputs bf;
  {
    ops::set_conv_precision(ops::Precision::kBFloat16);
    bf = model->forward_all(x);
    ops::set_conv_precision(ops::Precision::kFloat32);
  }
  ASSERT_EQ(q.size(), ref.size());
  // int8's error (per-tensor activation scales through 56 Convs) against bf16's (bf16 alone):
  // measured 0.214 / 0.458 of the spread against bf16's 0.045 / 0.092 (Release), 0.201 / 0.485
  // against 0.044 / 0.070 (the sanitizer build, -O1): well within the spread, and further from
  // float32 than bf16 is (so the Convs did run in int8).
  for (size_t i = 0; i < q.size(); ++i) {
    const double d = rel_diff(q[i], ref[i]), dbf = rel_diff(bf[i], ref[i]);
    std::printf("output %zu: largest difference of the spread, int8 %.3g, bf16 %.3g\n", i, d,
                dbf);
    EXPECT_LT(d, 0.6) << "output " << i;
    EXPECT_GT(d, 1.5 * dbf) << "output " << i << ": int8 no further from float32 than bf16?";
  }
  // The ranges round-trip through set_int8_ranges; names that are no int8-capable Conv fail.
  auto other = nn::make_model("yolov8n", nn::ModelOptions{2});
  nn::set_int8_ranges(*other, ranges);
  EXPECT_EQ(nn::int8_ranges(*other), ranges);
  EXPECT_NE(input_error([&] { nn::set_int8_ranges(*other, {{"model.0", 1.0}}); }),
            "no exception");
  EXPECT_NE(input_error([&] { nn::set_int8_ranges(*other, {{"model.2.cv1", -1.0}}); }),
            "no exception");
}

TEST(Int8Yolo, QuantizeThenEvalAndPredictInInt8) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512";
  TempDir tmp{"quantize_cli"};
  const fs::path dir = tmp.path();
  write_tiny_detect(dir / "data", 2, 4);
  const std::string yaml = (dir / "data" / "data.yaml").string();
  auto yolo = nn::make_model("yolov8n", nn::ModelOptions{2});
  train::ModelMeta meta;
  meta.model = "yolov8n";
  meta.task = "detect";
  meta.classes = {"red", "blue"};
  meta.imgsz = 64;
  train::save_model((dir / "m.safetensors").string(), *yolo, meta);

  RunResult r = run_hpcnet({"quantize", "--weights", "m.safetensors", "--data", yaml, "--images",
                            "3", "--batch-size", "2", "--workers", "0", "--threads", "2"},
                           dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // Batches of 2 until 3 images are seen: 4 images of val.
  EXPECT_NE(r.out.find("quantize: 4 val images calibrated 56 convolutions for int8; wrote "),
            std::string::npos)
      << r.out;
  const SafetensorsFile q = load_safetensors((dir / "m-int8.safetensors").string());
  const auto ranges = nlohmann::json::parse(q.metadata.at("hpcnet.int8"));
  EXPECT_EQ(ranges.size(), 56u);
  EXPECT_EQ(q.metadata.at("hpcnet.task"), "detect");  // the rest of the metadata is kept
  EXPECT_EQ(q.tensors.size(), load_safetensors((dir / "m.safetensors").string()).tensors.size());

  r = run_hpcnet({"eval", "--weights", "m-int8.safetensors", "--data", yaml, "--split", "val",
                  "--precision", "int8", "--json", "--threads", "2"},
                 dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(nlohmann::json::parse(split_lines(r.out).back()).contains("map50_95")) << r.out;
  r = run_hpcnet({"predict", "--weights", "m-int8.safetensors", "--precision", "int8", "--conf",
                  "0", "--json", (dir / "data" / "images" / "val" / "000.jpg").string()},
                 dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"boxes\""), std::string::npos) << r.out;

  // A file without the calibration, another task's model, bad arguments: one line, exit 2.
  expect_refused(run_hpcnet({"eval", "--weights", "m.safetensors", "--data", yaml, "--split",
                             "val", "--precision", "int8"},
                            dir),
                 "int8 without a calibration",
                 {"--precision int8: m.safetensors holds no int8 calibration",
                  "hpcnet quantize --weights m.safetensors"});
  auto lenet = nn::make_model("lenet", nn::ModelOptions{10});
  train::save_model((dir / "lenet.safetensors").string(), *lenet, "lenet", {}, 0);
  expect_refused(
      run_hpcnet({"quantize", "--weights", "lenet.safetensors", "--data", yaml}, dir),
      "a classifier", {"int8 covers YOLO (detect) models; lenet.safetensors is a classify"});
  expect_refused(run_hpcnet({"quantize", "--weights", "m.safetensors", "--data", yaml,
                             "--images", "0"},
                            dir),
                 "--images 0", {"--images must be at least 1"});
  expect_refused(run_hpcnet({"predict", "--weights", "m.safetensors", "--precision", "int4",
                             (dir / "data" / "images" / "val" / "000.jpg").string()},
                            dir),
                 "--precision int4", {"--precision must be fp32, bf16 or int8 (got 'int4')"});
}
