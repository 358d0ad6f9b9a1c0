// Tests of the task layer (hpcnet/task.h): the registry, classify's loss, metric (states summed
// over shards), report, evaluation, TTA, predictions and transforms; and what it needs from nn:
// forward_all, the ResNet trunk's features and flat names, ModelOptions and model_info.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "src/nn/models/models.h"
#include "test_util.h"

using namespace hpcnet;
using hpcnet::test_util::input_error;
using hpcnet::test_util::same_bytes;

namespace {

Tensor tk_randn(const Shape& s, uint64_t seed, double scale = 1.0) {
  Rng rng(seed, 21);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return Tensor::from_vector(v, s);
}

double tk_max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto va = a.to_vector_f64(), vb = b.to_vector_f64();
  double d = 0;
  for (size_t i = 0; i < std::min(va.size(), vb.size()); ++i)
    d = std::max(d, std::fabs(va[i] - vb[i]));
  return d;
}

// A batch of labels only (what the classify metric and loss read).
data::Batch tk_batch(const std::vector<int64_t>& labels) {
  data::Batch b;
  b.labels = Tensor::from_labels(labels);
  b.size = static_cast<int64_t>(labels.size());
  return b;
}

// Logits (N, C) whose argmax is pred[i]: 2 there, 0 elsewhere, plus a row-dependent tilt.
Tensor tk_logits_for(const std::vector<int64_t>& pred, int64_t nc) {
  std::vector<float> v(pred.size() * static_cast<size_t>(nc), 0.f);
  for (size_t i = 0; i < pred.size(); ++i)
    for (int64_t c = 0; c < nc; ++c)
      v[i * nc + c] = (c == pred[i] ? 2.f : 0.f) + 0.01f * static_cast<float>((i + c) % 3);
  return Tensor::from_vector(v, {static_cast<int64_t>(pred.size()), nc});
}

// n 32x32 images of 3 classes, each a colour with noise.
std::shared_ptr<data::InMemoryDataset> tk_dataset(int n) {
  auto ds = std::make_shared<data::InMemoryDataset>(std::vector<std::string>{"red", "green", "blue"});
  Rng rng(5, 1);
  std::vector<uint8_t> px(32 * 32 * 3);
  for (int i = 0; i < n; ++i) {
    const int label = i % 3;
    for (size_t p = 0; p < px.size(); ++p)
      px[p] = static_cast<uint8_t>(
          std::clamp((p % 3 == static_cast<size_t>(label) ? 180 : 40) +
                         static_cast<int>(rng.randint(61)) - 30,
                     0, 255));
    ds->add(px.data(), 32, 32, label, "img" + std::to_string(i));
  }
  return ds;
}

// The images mirrored left-right, by hand (not through task::flip_left_right).
Tensor tk_mirror(const Tensor& x) {
  std::vector<float> v = x.to_vector(), out(v.size());
  const int64_t w = x.size(3), rows = x.numel() / w;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) out[r * w + c] = v[r * w + (w - 1 - c)];
  return Tensor::from_vector(out, x.shape());
}

}  // namespace

// ---- the registry ------------------------------------------------------------------------------

TEST(TaskRegistry, MakeTaskByNameAndUnknownNamesListTheKnownOnes) {
  EXPECT_EQ(task::task_names(), (std::vector<std::string>{"classify", "segment", "detect"}));
  task::TaskOptions o;
  o.imgsz = 24;
  auto t = task::make_task("classify", o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "classify");
  EXPECT_EQ(t->target_kind(), data::TargetKind::kLabel);
  EXPECT_EQ(t->options().imgsz, 24);
  const std::string e = input_error([] { task::make_task("pose"); });
  EXPECT_NE(e.find("'pose'"), std::string::npos) << e;
  for (const std::string& n : task::task_names())
    EXPECT_NE(e.find(n), std::string::npos) << "the message lists " << n << ": " << e;
  o.imgsz = 0;
  EXPECT_NE(input_error([&] { task::make_task("classify", o); }).find("--imgsz"),
            std::string::npos);
}

// Every model of the registry serves a task that exists.
TEST(TaskRegistry, EveryModelsTaskIsKnown) {
  const auto tasks = task::task_names();
  for (const std::string& m : nn::model_names()) {
    const nn::ModelInfo& info = nn::model_info(m);
    EXPECT_EQ(info.name, m);
    EXPECT_NE(std::find(tasks.begin(), tasks.end(), info.task), tasks.end()) << m;
  }
}

// ---- classify: loss ----------------------------------------------------------------------------

// The loss is cross-entropy with label smoothing, (1 - e) * nll + e * mean over classes of
// -log p, averaged over the batch (computed here by hand), with a graph back to the logits.
TEST(TaskClassify, LossIsCrossEntropyWithLabelSmoothing) {
  const Tensor logits = tk_randn({5, 4}, 1, 2.0);
  const std::vector<int64_t> labels = {0, 3, 1, 1, 2};
  const data::Batch b = tk_batch(labels);
  for (double eps : {0.0, 0.1, 0.5}) {
    task::TaskOptions o;
    o.classify.label_smoothing = eps;
    auto t = task::make_task("classify", o);
    Tensor x = logits.clone();
    x.set_requires_grad(true);
    Tensor loss = t->loss({x}, b);
    // By hand, in double.
    const std::vector<float> v = logits.to_vector();
    double want = 0;
    for (size_t i = 0; i < labels.size(); ++i) {
      double mx = -1e30, z = 0;
      for (int c = 0; c < 4; ++c) mx = std::max(mx, double(v[i * 4 + c]));
      for (int c = 0; c < 4; ++c) z += std::exp(v[i * 4 + c] - mx);
      double nll = 0, uniform = 0;
      for (int c = 0; c < 4; ++c) {
        const double lp = v[i * 4 + c] - mx - std::log(z);
        if (c == labels[i]) nll = -lp;
        uniform += -lp / 4;
      }
      want += ((1 - eps) * nll + eps * uniform) / static_cast<double>(labels.size());
    }
    EXPECT_NEAR(loss.item(), want, 1e-5) << "label smoothing " << eps;
    EXPECT_NEAR(loss.item(), F::cross_entropy(logits, b.labels, eps).item(), 1e-7);
    loss.backward();
    ASSERT_TRUE(x.grad().defined()) << "the loss keeps its graph";
    EXPECT_EQ(x.grad().shape(), logits.shape());
  }
}

// ---- classify: metric --------------------------------------------------------------------------

// The metric's state adds up: two shards' states summed and set_state()d on a fresh metric give
// the metric of all the data (value, count, JSON, report). The numbers are known: 7 of 10 right.
TEST(TaskClassify, MetricStatesOfShardsAddUp) {
  auto t = task::make_task("classify");
  const std::vector<std::string> classes = {"cat", "dog", "eel"};
  const std::vector<int64_t> labels = {0, 1, 2, 0, 1, 2, 0, 1, 2, 2};
  const std::vector<int64_t> preds = {0, 1, 2, 1, 1, 0, 0, 2, 2, 2};  // 7 right: cat 2/3, dog 2/3,
                                                                    // eel 3/4
  auto slice = [&](const std::vector<int64_t>& v, size_t a, size_t b) {
    return std::vector<int64_t>(v.begin() + a, v.begin() + b);
  };
  auto add = [&](task::Metric& m, size_t a, size_t b) {
    m.add({tk_logits_for(slice(preds, a, b), 3)}, tk_batch(slice(labels, a, b)));
  };
  auto all = t->make_metric(classes);
  add(*all, 0, 4);
  add(*all, 4, 10);
  auto s1 = t->make_metric(classes), s2 = t->make_metric(classes);
  add(*s1, 0, 3);
  add(*s2, 3, 7);
  add(*s2, 7, 10);
  std::vector<double> sum = s1->state();
  ASSERT_EQ(sum.size(), s2->state().size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += s2->state()[i];
  auto merged = t->make_metric(classes);
  merged->set_state(sum);

  EXPECT_EQ(all->count(), 10);
  EXPECT_DOUBLE_EQ(all->value(), 70.0);
  EXPECT_EQ(all->value_key(), "val_accuracy");
  EXPECT_EQ(merged->state(), all->state());
  EXPECT_EQ(merged->count(), all->count());
  EXPECT_DOUBLE_EQ(merged->value(), all->value());
  EXPECT_EQ(merged->to_json(), all->to_json());
  EXPECT_EQ(merged->report("test"), all->report("test"));
  const nlohmann::json j = all->to_json();
  EXPECT_EQ(j.at("images"), 10);
  EXPECT_EQ(j.at("correct"), 7);
  EXPECT_NEAR(j.at("per_class").at("eel").get<double>(), 75.0, 1e-12);
  EXPECT_NEAR(j.at("per_class").at("dog").get<double>(), 200.0 / 3, 1e-12);
  // A shard alone is not the whole.
  EXPECT_NE(s1->count(), all->count());

  // A state of the wrong size is refused, and the metric keeps its state.
  std::vector<double> bad(sum.size() + 1, 0.0);
  EXPECT_NE(input_error([&] { merged->set_state(bad); }), "no exception");
  EXPECT_NE(input_error([&] { merged->set_state({}); }), "no exception");
  EXPECT_EQ(merged->state(), all->state());
  // An empty metric reads 0, not NaN.
  EXPECT_EQ(t->make_metric(classes)->value(), 0.0);
}

// report(): the tutorial's lines, per class, and last "accuracy: NN.NN%" with the value.
TEST(TaskClassify, ReportEndsWithTheAccuracy) {
  auto t = task::make_task("classify");
  auto m = t->make_metric({"cat", "dog"});
  // 2 of 3 right: 66.67%.
  m->add({tk_logits_for({0, 1, 1}, 2)}, tk_batch({0, 1, 0}));
  const std::string r = m->report("val");
  const auto lines = test_util::split_lines(r);
  ASSERT_EQ(lines.size(), 4u) << r;
  EXPECT_EQ(lines[0], "Accuracy of the network on the 3 val images: 66 %");
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(R"(Accuracy for class: cat +is 50\.0 %)")))
      << lines[1];
  EXPECT_TRUE(std::regex_match(lines[2], std::regex(R"(Accuracy for class: dog +is 100\.0 %)")))
      << lines[2];
  EXPECT_EQ(lines.back(), "accuracy: 66.67%");
  EXPECT_EQ(r.back(), '\n');
}

// ---- evaluation --------------------------------------------------------------------------------

// task::evaluate over a loader gives the counts of train::evaluate and of an argmax by hand, for a
// partial last batch too, and leaves the model in the mode it was in.
TEST(TaskEvaluate, EqualsTrainEvaluateAndAnArgmaxByHand) {
  manual_seed(3);
  auto model = nn::make_model("lenet", 3);
  auto ds = tk_dataset(10);
  auto t = task::make_task("classify");
  data::DataLoaderOptions o;
  o.batch_size = 4;
  data::DataLoader loader(ds, t->eval_transform(), o);
  model->train();
  auto m = task::evaluate(*t, *model, loader);
  EXPECT_TRUE(model->is_training()) << "the mode is restored";
  const train::EvalResult r = train::evaluate(*model, loader);

  // By hand: every image through the model in eval mode.
  model->eval();
  int64_t correct = 0;
  std::vector<int64_t> cc(3, 0), ct(3, 0);
  {
    NoGradGuard ng;
    loader.begin_epoch(0);
    data::Batch b;
    while (loader.next(b)) {
      Tensor pred = F::argmax(model->forward(b.images));
      for (int64_t i = 0; i < b.size; ++i) {
        const int64_t l = b.labels.data<int64_t>()[i];
        ct[l]++;
        if (pred.data<int64_t>()[i] == l) {
          cc[l]++;
          correct++;
        }
      }
    }
  }
  EXPECT_EQ(m->count(), 10);
  EXPECT_EQ(r.total, 10);
  EXPECT_EQ(r.correct, correct);
  EXPECT_EQ(r.class_correct, cc);
  EXPECT_EQ(r.class_total, ct);
  EXPECT_DOUBLE_EQ(m->value(), 100.0 * static_cast<double>(correct) / 10);
  EXPECT_DOUBLE_EQ(m->value(), r.accuracy());
  const std::vector<double> s = m->state();
  ASSERT_EQ(s.size(), 8u);
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(s[2 + c], static_cast<double>(cc[c]));
    EXPECT_EQ(s[5 + c], static_cast<double>(ct[c]));
  }
}

// ---- test-time augmentation --------------------------------------------------------------------

// infer(flip_tta) is forward(x) + forward(mirror(x)); without it, forward_all(x).
TEST(TaskInfer, FlipTtaSumsTheLogitsOfTheImageAndItsMirror) {
  manual_seed(4);
  auto model = nn::make_model("resnet20", 5);
  model->eval();
  auto t = task::make_task("classify");
  const Tensor x = tk_randn({2, 3, 8, 8}, 9);
  NoGradGuard ng;
  const Tensor plain = model->forward(x);
  const Tensor mirrored = model->forward(tk_mirror(x));
  task::Outputs tta = t->infer(*model, x, true);
  ASSERT_EQ(tta.size(), 1u);
  EXPECT_LE(tk_max_diff(tta[0], F::add(plain, mirrored)), 1e-6);
  EXPECT_GT(tk_max_diff(tta[0], plain), 1e-3) << "the mirror changes the logits";
  task::Outputs none = t->infer(*model, x, false);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(same_bytes(none[0], plain));
}

// flip_left_right mirrors every row, float32 and float64.
TEST(TaskInfer, FlipLeftRight) {
  const Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  EXPECT_EQ(task::flip_left_right(x).to_vector(), (std::vector<float>{3, 2, 1, 6, 5, 4}));
  const Tensor d = Tensor::from_vector_f64({1, 2, 3, 4}, {1, 2, 1, 2});
  EXPECT_EQ(task::flip_left_right(d).to_vector_f64(), (std::vector<double>{2, 1, 4, 3}));
  const Tensor r = tk_randn({2, 3, 4, 5}, 2);
  EXPECT_TRUE(same_bytes(task::flip_left_right(r), tk_mirror(r)));
}

namespace {
// A task that keeps Task::infer's default: it has no test-time augmentation.
class TkPlainTask : public task::Task {
 public:
  TkPlainTask() : Task(task::TaskOptions{}) {}
  std::string name() const override { return "plain"; }
  data::TargetKind target_kind() const override { return data::TargetKind::kLabel; }
  data::Compose train_transform() const override { return data::Compose(); }
  data::Compose eval_transform() const override { return data::Compose(); }
  Tensor loss(const task::Outputs& o, const data::Batch&) const override { return o.at(0); }
  std::unique_ptr<task::Metric> make_metric(const std::vector<std::string>&) const override {
    return nullptr;
  }
  task::Prediction predict(const task::Outputs&, int64_t, const std::vector<std::string>&,
                           const task::PredictOptions&) const override {
    return {};
  }
};
}  // namespace

// Task::infer's default is forward_all, and a flip_tta request is refused naming the task.
TEST(TaskInfer, DefaultInferIsForwardAllAndRefusesTta) {
  manual_seed(5);
  auto model = nn::make_model("lenet");
  TkPlainTask t;
  const Tensor x = tk_randn({1, 3, 32, 32}, 3);
  NoGradGuard ng;
  task::Outputs o = t.infer(*model, x, false);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_TRUE(same_bytes(o[0], model->forward(x)));
  const std::string e = input_error([&] { t.infer(*model, x, true); });
  EXPECT_NE(e.find("plain"), std::string::npos) << e;
  EXPECT_NE(e.find("--tta-flip"), std::string::npos) << e;
}

// ---- predictions -------------------------------------------------------------------------------

// predict(): the top k classes by probability (softmax, by hand), best first, as JSON and as the
// text line; k is capped at the number of classes, where the probabilities sum to 1.
TEST(TaskPredict, TopKSortedWithSoftmaxProbabilities) {
  auto t = task::make_task("classify");
  const std::vector<std::string> classes = {"ant", "bee", "cow", "dog"};
  const Tensor logits = Tensor::from_vector({0, 0, 0, 0, 1, 3, 2, -1}, {2, 4});
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(-1.0);
  task::PredictOptions po;
  po.top = 3;
  task::Prediction p = t->predict({logits}, 1, classes, po);
  const nlohmann::json& top = p.json.at("top");
  ASSERT_EQ(top.size(), 3u);
  const char* want_names[3] = {"bee", "cow", "ant"};
  const double want_p[3] = {std::exp(3.0) / z, std::exp(2.0) / z, std::exp(1.0) / z};
  double sum = 0;
  std::string line;
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(top[j].at("class"), want_names[j]);
    EXPECT_NEAR(top[j].at("probability").get<double>(), want_p[j], 1e-6);
    sum += top[j].at("probability").get<double>();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s %s %.3f", j ? "," : "", want_names[j], want_p[j]);
    line += buf;
  }
  EXPECT_LT(sum, 1.0);
  EXPECT_EQ(p.line, line);  // " bee 0.665, cow 0.245, ant 0.090"

  po.top = 10;
  p = t->predict({logits}, 0, classes, po);
  ASSERT_EQ(p.json.at("top").size(), 4u);
  sum = 0;
  for (const auto& e : p.json.at("top")) {
    EXPECT_NEAR(e.at("probability").get<double>(), 0.25, 1e-6);
    sum += e.at("probability").get<double>();
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // Ties keep class order.
  EXPECT_EQ(p.json.at("top")[0].at("class"), "ant");
  EXPECT_EQ(p.json.at("top")[3].at("class"), "dog");
}

// ---- transforms --------------------------------------------------------------------------------

// Both transforms bring an image of any size to imgsz x imgsz; the training one adds the
// augmentation and Cutout only when asked.
TEST(TaskClassify, TransformsBringAnyImageToImgsz) {
  task::TaskOptions o;
  o.imgsz = 24;
  auto plain = task::make_task("classify", o);
  o.augment = "default";
  o.classify.cutout = 8;
  auto aug = task::make_task("classify", o);
  for (auto [h, w] : {std::pair{50, 40}, std::pair{24, 24}, std::pair{7, 90}}) {
    const std::array<int64_t, 3> want{3, 24, 24};
    EXPECT_EQ(plain->eval_transform().output_shape(h, w), want);
    EXPECT_EQ(plain->train_transform().output_shape(h, w), want);
    EXPECT_EQ(aug->train_transform().output_shape(h, w), want);
  }
  EXPECT_EQ(plain->train_transform().str().find("Random"), std::string::npos);
  const std::string s = aug->train_transform().str();
  EXPECT_NE(s.find("RandomCrop(24, padding=4)"), std::string::npos) << s;
  EXPECT_NE(s.find("RandomHorizontalFlip"), std::string::npos) << s;
  EXPECT_NE(s.find("Cutout(8)"), std::string::npos) << s;
  EXPECT_EQ(aug->eval_transform().str(), plain->eval_transform().str());
}

// ---- nn: outputs, trunks, the model registry --------------------------------------------------

// Module::forward_all is {forward(x)} for a model with one output.
TEST(TaskModels, ForwardAllDefaultsToForward) {
  manual_seed(6);
  auto model = nn::make_model("lenet");
  const Tensor x = tk_randn({2, 3, 32, 32}, 4);
  NoGradGuard ng;
  nn::Outputs o = model->forward_all(x);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_TRUE(same_bytes(o[0], model->forward(x)));
}

// The ResNet trunk returns one map per stage: strides 1, 2, 4 and widths 16, 32, 64 for resnet20;
// its last map is trunk->forward(x) and the model's logits are the head over it.
TEST(TaskModels, ResNetTrunkFeatures) {
  manual_seed(7);
  auto model = std::dynamic_pointer_cast<nn::CifarResNet>(nn::make_model("resnet20"));
  ASSERT_NE(model, nullptr);
  model->eval();
  nn::ResNetTrunk& trunk = *model->trunk;
  EXPECT_EQ(trunk.feature_strides(), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(trunk.feature_channels(), (std::vector<int64_t>{16, 32, 64}));
  const Tensor x = tk_randn({2, 3, 16, 16}, 5);
  NoGradGuard ng;
  nn::Outputs f = trunk.forward_features(x);
  ASSERT_EQ(f.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const int64_t s = trunk.feature_strides()[k];
    EXPECT_EQ(f[k].shape(), (Shape{2, trunk.feature_channels()[k], 16 / s, 16 / s})) << k;
  }
  EXPECT_TRUE(same_bytes(f.back(), trunk.forward(x)));
  EXPECT_TRUE(same_bytes(f.back(), static_cast<nn::Trunk&>(trunk).nn::Trunk::forward(x)));
  const Tensor head = model->linear->forward(F::global_avg_pool2d(f.back()));
  EXPECT_LE(tk_max_diff(model->forward(x), head), 1e-6);
}

// The trunk is inlined (registered as ""): the model's names are PyTorch's, with no leading dot
// and no "trunk." prefix, and they are the trunk's own names followed by the head's.
TEST(TaskModels, InlinedTrunkKeepsPyTorchNames) {
  auto model = std::dynamic_pointer_cast<nn::CifarResNet>(nn::make_model("resnet20"));
  ASSERT_NE(model, nullptr);
  std::vector<std::string> names;
  for (const auto& [n, p] : model->state_dict()) names.push_back(n);
  for (const char* want : {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                           "layer3.2.bn2.bias", "linear.weight", "linear.bias"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const std::string& n : names) {
    EXPECT_NE(n.front(), '.') << n;
    EXPECT_EQ(n.find(".."), std::string::npos) << n;
    EXPECT_EQ(n.rfind("trunk", 0), std::string::npos) << n;
  }
  std::vector<std::string> trunk_names;
  for (const auto& [n, p] : model->trunk->named_parameters()) trunk_names.push_back(n);
  std::vector<std::string> params;
  for (const auto& [n, p] : model->named_parameters()) params.push_back(n);
  trunk_names.insert(trunk_names.end(), {"linear.weight", "linear.bias"});
  EXPECT_EQ(params, trunk_names);
}

// make_model(name, ModelOptions{7}) sizes every model's head to 7 classes (the last parameter is
// the head's bias; YOLO's last is the fixed DFL integral, after the class branches' biases); two
// of them run.
TEST(TaskModels, ModelOptionsSetTheClassCount) {
  for (const std::string& name : nn::model_names()) {
    auto model = nn::make_model(name, nn::ModelOptions{7});
    const nn::NamedTensors params = model->named_parameters();
    Shape head = params.back().second.shape();
    if (nn::model_info(name).task == "detect")
      for (const auto& [n, p] : params)
        if (n.ends_with(".cv3.2.2.bias")) head = p.shape();  // model.22 (v8), model.23 (11)
    EXPECT_EQ(head, (Shape{7})) << name;
    if (name != "lenet" && name != "resnet20") continue;
    model->eval();
    NoGradGuard ng;
    EXPECT_EQ(model->forward(tk_randn({2, 3, 32, 32}, 6)).shape(), (Shape{2, 7})) << name;
  }
  EXPECT_NE(input_error([] { nn::make_model("lenet", nn::ModelOptions{0}); }), "no exception");
}

TEST(TaskModels, ModelInfo) {
  const nn::ModelInfo& l = nn::model_info("lenet");
  EXPECT_EQ(l.name, "lenet");
  EXPECT_EQ(l.task, "classify");
  EXPECT_EQ(l.imgsz, 32);
  EXPECT_TRUE(l.fixed_size);
  EXPECT_FALSE(nn::model_info("resnet20").fixed_size);
  const std::string e = input_error([] { nn::model_info("resnet999"); });
  EXPECT_NE(e.find("resnet999"), std::string::npos) << e;
  EXPECT_NE(e.find("resnet20"), std::string::npos) << "lists the known models: " << e;
}
