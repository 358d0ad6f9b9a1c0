// YOLO models built from descriptions (src/nn/models/yolo*.cpp): every state_dict name and shape
// and the parameter count of the ten named models against Ultralytics 8.4.190
// (tests/golden/yolo_state_dicts.json, written by tests/golden/make_yolo_state_dicts.py); a model
// YAML in Ultralytics' format gives the named model; bad rows fail naming the row; the predict
// path (folded, concatenations in place) gives the plain path's outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "src/nn/models/yolo.h"
#include "src/ops/ops.h"
#include "test_util.h"

namespace fs = std::filesystem;

using namespace hpcnet;
using test_util::fill_from_formula;
using test_util::rel_err;

namespace {

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/yolo_state_dicts.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

// Ultralytics' state_dict of `key` ("yolo11n@80"): parameters, then every BatchNorm's buffers.
std::map<std::string, Shape> reference(const std::string& key) {
  const auto& m = fixture()["models"][key];
  std::map<std::string, Shape> out;
  for (const auto& e : m["params"]) out[e[0].get<std::string>()] = e[1].get<Shape>();
  for (const auto& b : m["batchnorms"]) {
    const std::string p = b.get<std::string>();
    const Shape s = out.at(p + ".weight");
    out[p + ".running_mean"] = s;
    out[p + ".running_var"] = s;
    out[p + ".num_batches_tracked"] = {};
  }
  return out;
}

void expect_ultralytics(const std::string& name, int64_t nc) {
  const std::string key = name + "@" + std::to_string(nc);
  SCOPED_TRACE(key);
  const auto& ref = fixture()["models"][key];
  ASSERT_FALSE(ref.is_null());
  auto m = nn::make_model(name, nn::ModelOptions{nc});
  EXPECT_EQ(m->num_parameters(), ref["parameters"].get<int64_t>());
  const auto sd = m->state_dict();
  EXPECT_EQ(static_cast<int64_t>(sd.size()), ref["entries"].get<int64_t>());
  const std::map<std::string, Shape> theirs = reference(key);
  std::map<std::string, Shape> ours;
  for (auto& [n, t] : sd) ours[n] = t.shape();
  int mismatched = 0;
  for (auto& [n, s] : theirs) {
    auto it = ours.find(n);
    if (it == ours.end() || it->second != s) {
      if (++mismatched <= 10)
        ADD_FAILURE() << n << ": " << (it == ours.end() ? "missing" : shape_str(it->second))
                      << ", Ultralytics " << shape_str(s);
    }
  }
  for (auto& [n, s] : ours)
    if (!theirs.count(n) && ++mismatched <= 10) ADD_FAILURE() << "not in Ultralytics': " << n;
  EXPECT_EQ(mismatched, 0);
  // The parameters in Ultralytics' order, and the head's kind.
  std::vector<std::string> order;
  for (auto& [n, t] : m->named_parameters()) order.push_back(n);
  ASSERT_EQ(order.size(), ref["params"].size());
  for (size_t i = 0; i < order.size(); ++i)
    ASSERT_EQ(order[i], ref["params"][i][0].get<std::string>()) << "parameter " << i;
  auto* model = dynamic_cast<nn::YoloModel*>(m.get());
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->detect->legacy, ref["legacy_head"].get<bool>());
}

// Ultralytics' cfg/models/11/yolo11.yaml (8.4.190), comments dropped.
const char* const kYolo11Yaml = R"(nc: 80
scales:
  n: [0.50, 0.25, 1024]
  s: [0.50, 0.50, 1024]
  m: [0.50, 1.00, 512]
  l: [1.00, 1.00, 512]
  x: [1.00, 1.50, 512]
backbone:
  - [-1, 1, Conv, [64, 3, 2]] # 0-P1/2
  - [-1, 1, Conv, [128, 3, 2]] # 1-P2/4
  - [-1, 2, C3k2, [256, False, 0.25]]
  - [-1, 1, Conv, [256, 3, 2]] # 3-P3/8
  - [-1, 2, C3k2, [512, False, 0.25]]
  - [-1, 1, Conv, [512, 3, 2]] # 5-P4/16
  - [-1, 2, C3k2, [512, True]]
  - [-1, 1, Conv, [1024, 3, 2]] # 7-P5/32
  - [-1, 2, C3k2, [1024, True]]
  - [-1, 1, SPPF, [1024, 5]] # 9
  - [-1, 2, C2PSA, [1024]] # 10
head:
  - [-1, 1, nn.Upsample, [None, 2, "nearest"]]
  - [[-1, 6], 1, Concat, [1]] # cat backbone P4
  - [-1, 2, C3k2, [512, False]] # 13
  - [-1, 1, nn.Upsample, [None, 2, "nearest"]]
  - [[-1, 4], 1, Concat, [1]] # cat backbone P3
  - [-1, 2, C3k2, [256, False]] # 16 (P3/8-small)
  - [-1, 1, Conv, [256, 3, 2]]
  - [[-1, 13], 1, Concat, [1]] # cat head P4
  - [-1, 2, C3k2, [512, False]] # 19 (P4/16-medium)
  - [-1, 1, Conv, [512, 3, 2]]
  - [[-1, 10], 1, Concat, [1]] # cat head P5
  - [-1, 2, C3k2, [1024, True]] # 22 (P5/32-large)
  - [[16, 19, 22], 1, Detect, [nc]] # Detect(P3, P4, P5)
)";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return p == std::string::npos ? s : s.replace(p, from.size(), to);
}

std::shared_ptr<nn::Module> formula_model(const std::string& name, int64_t nc) {
  auto m = nn::make_model(name, nn::ModelOptions{nc});
  for (auto& [n, t] : m->state_dict())
    if (n.find("dfl.conv.weight") == std::string::npos &&
        n.find("num_batches") == std::string::npos)
      fill_from_formula(n, t);
  return m;
}

// An input image batch: sin(0.37 i + phase) of the flat index i.
Tensor wave(const Shape& shape, double phase) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + phase));
  return Tensor::from_vector(v, shape);
}

std::string error_of(const std::string& model) {
  try {
    nn::make_model(model, nn::ModelOptions{10});
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Yolo, Yolov8StateDictsAndCountsAreUltralytics) {
  for (const char* s : {"n", "s", "m", "l", "x"}) expect_ultralytics(std::string("yolov8") + s, 80);
  expect_ultralytics("yolov8n", 10);
}

TEST(Yolo, Yolo11StateDictsAndCountsAreUltralytics) {
  for (const char* s : {"n", "s", "m", "l", "x"}) expect_ultralytics(std::string("yolo11") + s, 80);
  expect_ultralytics("yolo11n", 10);
}

TEST(Yolo, ModelYamlGivesTheNamedModel) {
  test_util::TempDir dir("yolo_yaml");
  test_util::write_file(dir / "yolo11n.yaml", kYolo11Yaml);
  const std::string path = dir.str("yolo11n.yaml");
  EXPECT_EQ(nn::model_info(path).task, "detect");
  EXPECT_EQ(nn::model_info(path).size_multiple, 32);
  auto from_yaml = formula_model(path, 10), named = formula_model("yolo11n", 10);
  const auto a = from_yaml->state_dict(), b = named->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
  }
  // The same outputs (training mode: batch statistics, no folding).
  const Tensor x = wave({2, 3, 64, 64}, 0.3);
  const nn::Outputs ya = from_yaml->forward_all(x), yb = named->forward_all(x);
  ASSERT_EQ(ya.size(), 2u);
  EXPECT_EQ(ya[0].shape(), (Shape{2, 64, 84}));
  EXPECT_EQ(ya[1].shape(), (Shape{2, 10, 84}));
  EXPECT_EQ(ya[0].to_vector(), yb[0].to_vector());
  EXPECT_EQ(ya[1].to_vector(), yb[1].to_vector());
  // The scale: the file name's letter, else the `scale` key, else the first.
  test_util::write_file(dir / "yolo11s.yaml", kYolo11Yaml);
  EXPECT_EQ(nn::make_model(dir.str("yolo11s.yaml"), 80)->num_parameters(),
            fixture()["models"]["yolo11s@80"]["parameters"].get<int64_t>());
  test_util::write_file(dir / "mine.yaml", std::string("scale: m\n") + kYolo11Yaml);
  EXPECT_EQ(nn::make_model(dir.str("mine.yaml"), 80)->num_parameters(),
            fixture()["models"]["yolo11m@80"]["parameters"].get<int64_t>());
  test_util::write_file(dir / "first.yml", kYolo11Yaml);
  EXPECT_EQ(nn::make_model(dir.str("first.yml"), 80)->num_parameters(),
            fixture()["models"]["yolo11n@80"]["parameters"].get<int64_t>());
}

TEST(Yolo, BadRowsFailNamingTheRow) {
  test_util::TempDir dir("yolo_bad");
  auto write = [&](const std::string& file, const std::string& text) {
    test_util::write_file(dir / file, text);
    return dir.str(file);
  };
  const std::string unknown =
      error_of(write("yolo11n.yaml", replaced(kYolo11Yaml, "[-1, 2, C3k2, [512, False]] # 13",
                                              "[-1, 2, C3k9, [512, False]]")));
  EXPECT_NE(
      unknown.find(
          "head row 2 (layer 13, line 23) [-1, 2, C3k9, [512, False]]: unknown module 'C3k9'"),
      std::string::npos)
      << unknown;
  EXPECT_EQ(unknown.find('\n'), std::string::npos) << "one line";
  const std::string from =
      error_of(write("yolo11n-from.yaml", replaced(kYolo11Yaml, "[[-1, 13], 1, Concat, [1]]",
                                                   "[[-1, 30], 1, Concat, [1]]")));
  EXPECT_NE(from.find("head row 7 (layer 18, line 28)"), std::string::npos) << from;
  EXPECT_NE(from.find("from index 30 is not an earlier layer"), std::string::npos) << from;
  const std::string args = error_of(write(
      "yolo11n-args.yaml",
      replaced(kYolo11Yaml, "[-1, 1, Conv, [256, 3, 2]] # 3-P3/8", "[-1, 1, Conv, [True, 3, 2]]")));
  EXPECT_NE(args.find("backbone row 3 (layer 3, line 12) [-1, 1, Conv, [True, 3, 2]]: argument 1 "
                      "(True) must be a number"),
            std::string::npos)
      << args;
  const std::string shape = error_of(
      write("yolo11n-row.yaml", replaced(kYolo11Yaml, "[-1, 2, C2PSA, [1024]]", "[-1, 2, C2PSA]")));
  EXPECT_NE(shape.find("backbone row 10 (line 19): a row is [from, repeats, module, args]"),
            std::string::npos)
      << shape;
  const std::string strides =
      error_of(write("yolo11n-detect.yaml", replaced(kYolo11Yaml, "[[16, 19, 22], 1, Detect",
                                                     "[[16, 19, 13], 1, Detect")));
  EXPECT_NE(strides.find("Detect must read 3 maps at strides 8, 16, 32"), std::string::npos)
      << strides;
  EXPECT_NE(error_of(dir.str("missing.yaml")).find("cannot read the model YAML"),
            std::string::npos);
  EXPECT_NE(error_of(write("broken.yaml", "backbone: [[-1, 1, Conv")).find("not valid YAML"),
            std::string::npos);
}

TEST(Yolo, Yolo11TrainsThroughEveryParameter) {
  auto m = formula_model("yolo11n", 10);
  m->train();
  const nn::Outputs y = m->forward_all(wave({2, 3, 64, 64}, 0.5));
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0].shape(), (Shape{2, 64, 84}));
  EXPECT_EQ(y[1].shape(), (Shape{2, 10, 84}));
  F::add(F::sum(y[0]), F::sum(y[1])).backward();
  for (auto& [n, p] : m->named_parameters()) {
    if (!p.requires_grad()) continue;
    ASSERT_TRUE(p.grad().defined()) << n;
    double s = 0;
    for (double v : p.grad().to_vector_f64()) s += v * v;
    EXPECT_TRUE(std::isfinite(s)) << n;
  }
}

// Predict time (eval, no graph, one image): BatchNorm folded and concatenations written in place
// give the plain eval path's outputs.
TEST(Yolo, PredictPathMatchesThePlainPath) {
  for (const char* name : {"yolov8n", "yolo11n", "yolov8s"}) {
    SCOPED_TRACE(name);
    auto m = formula_model(name, 10);
    m->eval();
    NoGradGuard ng;
    const Tensor x = wave({1, 3, 96, 64}, 0.7);
    nn::set_inference_fusion(false);
    nn::set_concat_in_place(false);
    const nn::Outputs plain = m->forward_all(x);
    nn::set_inference_fusion(true);
    const nn::Outputs folded = m->forward_all(x);
    nn::set_concat_in_place(true);
    const nn::Outputs in_place = m->forward_all(x);
    for (int k = 0; k < 2; ++k) {
      EXPECT_LT(rel_err(folded[k], plain[k]), 1e-5) << k;
      EXPECT_EQ(in_place[k].to_vector(), folded[k].to_vector()) << k;
    }
  }
}

// Training is unaffected by the inference folding: in train mode, and in eval mode while a graph
// is recorded, every Conv runs unfolded (BatchNorm and SiLU as ops of their own), so turning the
// folding off changes nothing, bit for bit.
TEST(Yolo, TrainingAndRecordedForwardsDoNotFold) {
  auto m = formula_model("yolov8n", 10);
  const Tensor x = wave({2, 3, 64, 64}, 0.3);
  nn::YoloConv* conv = nullptr;
  for (auto& [n, mod] : m->named_modules())
    if (!conv) conv = dynamic_cast<nn::YoloConv*>(mod);
  ASSERT_NE(conv, nullptr);
  auto outputs = [&](bool fold, bool train) {
    struct Restore {
      ~Restore() { nn::set_inference_fusion(true); }
    } restore;
    nn::set_inference_fusion(fold);
    m->train(train);
    nn::Outputs y = m->forward_all(x);  // grad mode on: the parameters record a graph
    if (conv) EXPECT_FALSE(conv->folds());
    std::vector<std::vector<float>> v;
    for (const Tensor& t : y) v.push_back(t.to_vector());
    return v;
  };
  EXPECT_EQ(outputs(true, false), outputs(false, false)) << "eval mode with a graph";
  // Train mode updates the running statistics: each run from the same ones.
  const auto state = m->state_dict();
  std::map<std::string, std::vector<float>> saved;
  for (auto& [n, t] : state) saved[n] = t.to_vector();
  auto restore_stats = [&] {
    for (auto& [n, t] : m->state_dict()) t.copy_(Tensor::from_vector(saved[n], t.shape()));
  };
  const auto folded = outputs(true, true);
  restore_stats();
  EXPECT_EQ(folded, outputs(false, true)) << "train mode";
}

// --precision bf16 at predict time (eval, no graph): every Conv but the RGB stem and the
// 16-channel stride-2 one computes in bfloat16 (src/ops/conv2d/cpu.cpp, conv_inference_bf16);
// the outputs stay within bfloat16's reach of the float32 ones.
TEST(Yolo, Bf16PredictPathStaysNearFloat32) {
  if (!ops::cpu_supports_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16)";
  auto m = formula_model("yolov8n", 10);
  m->eval();
  NoGradGuard ng;
  const Tensor x = wave({1, 3, 96, 64}, 0.7);
  const nn::Outputs f32 = m->forward_all(x);
  nn::Outputs bf;
  {
    struct Restore {
      ~Restore() { ops::set_conv_precision(ops::Precision::kFloat32); }
    } restore;
    ops::set_conv_precision(ops::Precision::kBFloat16);
    bf = m->forward_all(x);
  }
  for (int k = 0; k < 2; ++k) {
    const double e = rel_err(bf[k], f32[k]);
    EXPECT_LT(e, 3e-2) << k;
    EXPECT_GT(e, 1e-6) << k << ": identical to float32, so bf16 did not run";
  }
}

// The command on a tiny dataset: yolo11n trains an epoch and evaluates, its model file predicts
// and exports to ONNX; a model YAML path serves as the model name (train, and eval from its file).
TEST(YoloCli, Yolo11TrainsEvaluatesPredictsAndExports) {
  test_util::TempDir tmp{"yolo11_cli"};
  const fs::path dir = tmp.path();
  test_util::write_tiny_detect(dir / "data", 8, 4);
  const std::string yaml = (dir / "data" / "data.yaml").string();
  test_util::write_file(dir / "yolo11n.yaml", kYolo11Yaml);
  auto train = [&](const std::string& model, const std::string& out) {
    return test_util::run_hpcnet(
        {"train", "--model", model, "--data", yaml, "--imgsz", "64", "--epochs", "1",
         "--batch-size", "4", "--workers", "0", "--threads", "2", "--out", (dir / out).string()},
        dir);
  };
  for (const std::string model : {std::string("yolo11n"), (dir / "yolo11n.yaml").string()}) {
    SCOPED_TRACE(model);
    const std::string out = model == "yolo11n" ? "run" : "run_yaml";
    test_util::RunResult r = train(model, out);
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("% mAP50 "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
    const std::string w = (dir / out / "model.safetensors").string();
    r = test_util::run_hpcnet({"eval", "--weights", w, "--data", yaml, "--split", "val"}, dir);
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_EQ(test_util::split_lines(r.out).back().rfind("val: mAP50-95: ", 0), 0u) << r.out;
  }
  const std::string w = (dir / "run" / "model.safetensors").string();
  test_util::RunResult r = test_util::run_hpcnet(
      {"predict", "--weights", w, (dir / "data" / "images" / "val" / "000.jpg").string(), "--json"},
      dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  r = test_util::run_hpcnet({"export", "--weights", w, "--out", (dir / "y.onnx").string()}, dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(dir / "y.onnx"));
}
