// The classification task: one class label per image. Loss: cross-entropy of the logits (N, C)
// with optional label smoothing; metric: correct and total per class (the tutorial's "Accuracy
// for class" lines); predict: the top classes with their softmax probabilities; test-time
// augmentation: the summed logits of each image and its left-right mirror.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hpcnet/functional.h"
#include "hpcnet/task.h"

namespace hpcnet::task {
namespace {

std::string pct1(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b ? 100.0 * a / b : 0.0);
  return buf;
}

// State: [correct, total, class_correct[0..C), class_total[0..C)].
class ClassifyMetric : public Metric {
 public:
  explicit ClassifyMetric(std::vector<std::string> classes)
      : classes_(std::move(classes)), s_(2 + 2 * classes_.size(), 0.0) {}

  void add(const Outputs& outputs, const data::Batch& b) override {
    HPCNET_CHECK(!outputs.empty() && outputs[0].dim() == 2 && outputs[0].size(0) == b.size,
                 "classify metric: expected logits (" + std::to_string(b.size) + ", C)");
    Tensor pred = F::argmax(outputs[0]);
    const int64_t* p = pred.data<int64_t>();
    const int64_t* l = b.labels.data<int64_t>();
    const size_t nc = classes_.size();
    for (int64_t i = 0; i < b.size; ++i) {
      const size_t c = static_cast<size_t>(l[i]);
      HPCNET_CHECK(c < nc, "classify metric: label " + std::to_string(l[i]) + " out of range");
      s_[2 + nc + c] += 1;
      s_[1] += 1;
      if (p[i] == l[i]) {
        s_[2 + c] += 1;
        s_[0] += 1;
      }
    }
  }
  std::vector<double> state() const override { return s_; }
  void set_state(const std::vector<double>& s) override {
    HPCNET_REQUIRE(s.size() == s_.size(), "classify metric: state of " + std::to_string(s.size()) +
                                              " numbers, expected " + std::to_string(s_.size()));
    s_ = s;
  }
  double value() const override { return s_[1] ? 100.0 * s_[0] / s_[1] : 0.0; }
  std::string value_key() const override { return "val_accuracy"; }
  int64_t count() const override { return static_cast<int64_t>(s_[1]); }

  int64_t correct() const { return static_cast<int64_t>(s_[0]); }
  int64_t class_correct(size_t c) const { return static_cast<int64_t>(s_[2 + c]); }
  int64_t class_total(size_t c) const { return static_cast<int64_t>(s_[2 + classes_.size() + c]); }

  std::string report(const std::string& split) const override {
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "Accuracy of the network on the %lld %s images: %d %%\n",
                  static_cast<long long>(count()), split.c_str(),
                  static_cast<int>(100 * correct() / std::max<int64_t>(count(), 1)));
    out += line;
    for (size_t c = 0; c < classes_.size(); ++c) {
      std::snprintf(line, sizeof line, "Accuracy for class: %-10s is %s %%\n", classes_[c].c_str(),
                    pct1(class_correct(c), class_total(c)).c_str());
      out += line;
    }
    std::snprintf(line, sizeof line, "accuracy: %.2f%%\n", value());
    return out + line;
  }
  nlohmann::json to_json() const override {
    nlohmann::json per = nlohmann::json::object();
    for (size_t c = 0; c < classes_.size(); ++c)
      per[classes_[c]] = class_total(c) ? 100.0 * class_correct(c) / class_total(c) : 0.0;
    return {{"images", count()}, {"correct", correct()}, {"accuracy", value()}, {"per_class", per}};
  }

 private:
  std::vector<std::string> classes_;
  std::vector<double> s_;
};

class ClassifyTask : public Task {
 public:
  explicit ClassifyTask(const TaskOptions& o) : Task(o) {}
  std::string name() const override { return "classify"; }
  data::TargetKind target_kind() const override { return data::TargetKind::kLabel; }
  std::vector<std::string> augment_policies() const override { return {"cifar", "imagenet"}; }

  // cifar (and the default): Resize (a no-op for images already imgsz x imgsz),
  // [RandomCrop(imgsz, padding=4), RandomHorizontalFlip], ToTensor, Normalize(0.5, 0.5),
  // [Cutout]. imagenet: torchvision's ImageNet training transforms, RandomResizedCrop(imgsz,
  // scale=(0.08, 1), ratio=(3/4, 4/3)), RandomHorizontalFlip, ToTensor, Normalize(ImageNet's).
  data::Compose train_transform() const override {
    const TaskOptions& o = options();
    std::vector<data::Transform> t;
    if (o.augment == "imagenet") {
      t = {data::RandomResizedCrop{o.imgsz}, data::RandomHorizontalFlip{0.5}, data::ToTensor{},
           kImageNet};
    } else {
      t = {data::Resize{o.imgsz, o.imgsz}};
      if (!o.augment.empty()) {
        t.push_back(data::RandomCrop{o.imgsz, 4});
        t.push_back(data::RandomHorizontalFlip{0.5});
      }
      t.push_back(data::ToTensor{});
      t.push_back(kNormalize);
    }
    if (o.classify.cutout > 0) t.push_back(data::Cutout{o.classify.cutout});
    return data::Compose(t);
  }
  // The tutorial's normalisation, Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), after a Resize to
  // imgsz; for a model trained with --augment imagenet, torchvision's ImageNet evaluation:
  // Resize(imgsz * 256 / 224) (the shorter side), CenterCrop(imgsz), Normalize(ImageNet's).
  data::Compose eval_transform() const override {
    const int64_t s = options().imgsz;
    if (options().augment == "imagenet")
      return data::Compose({data::ResizeShorter{s * 256 / 224}, data::CenterCrop{s},
                            data::ToTensor{}, kImageNet});
    return data::Compose({data::Resize{s, s}, data::ToTensor{}, kNormalize});
  }
  int64_t decode_min_side() const override {
    const int64_t s = options().imgsz;
    return options().augment == "imagenet" ? s * 256 / 224 : s;
  }
  Tensor loss(const Outputs& outputs, const data::Batch& batch) const override {
    return F::cross_entropy(outputs.at(0), batch.labels, options().classify.label_smoothing);
  }
  std::unique_ptr<Metric> make_metric(const std::vector<std::string>& classes) const override {
    return std::make_unique<ClassifyMetric>(classes);
  }
  Outputs infer(nn::Module& model, const Tensor& images, bool flip_tta) const override {
    Tensor logits = model.forward(images);
    if (flip_tta) {
      const Tensor cpu = images.device().is_cpu() ? images : images.to(cpu_device());
      logits = F::add(logits, model.forward(flip_left_right(cpu).to(images.device())));
    }
    return {logits};
  }
  Prediction predict(const Outputs& outputs, int64_t i, const std::vector<std::string>& classes,
                     const PredictOptions& po) const override {
    Tensor logits = outputs.at(0);
    std::vector<float> lp = F::log_softmax(logits).to_vector();
    const int64_t nc = logits.size(1);
    const float* row = lp.data() + i * nc;
    std::vector<int> idx(static_cast<size_t>(nc));
    for (int64_t k = 0; k < nc; ++k) idx[static_cast<size_t>(k)] = static_cast<int>(k);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return row[a] > row[b]; });
    const int k = std::min<int>(po.top, static_cast<int>(nc));
    Prediction p;
    p.json = {{"top", nlohmann::json::array()}};
    char buf[64];
    for (int j = 0; j < k; ++j) {
      const std::string& name = classes.at(static_cast<size_t>(idx[j]));
      const double prob = std::exp(row[idx[j]]);
      p.json["top"].push_back({{"class", name}, {"probability", prob}});
      std::snprintf(buf, sizeof buf, "%s %s %.3f", j ? "," : "", name.c_str(), prob);
      p.line += buf;
    }
    return p;
  }
  // The top 5 classes and their probabilities, one per line at the top left, as Ultralytics'
  // classification plot.
  void annotate(data::Image& frame, const Outputs& outputs, int64_t i,
                const std::vector<std::string>& classes, const PredictOptions& po) const override {
    PredictOptions o = po;
    o.top = 5;
    std::vector<data::LegendEntry> lines;
    char buf[160];
    const Prediction p = predict(outputs, i, classes, o);
    for (const auto& t : p.json.at("top")) {
      std::snprintf(buf, sizeof buf, "%s %.2f", t.at("class").get<std::string>().c_str(),
                    t.at("probability").get<double>());
      lines.push_back({buf, {}, false});
    }
    data::draw_legend(frame.pixels.data(), frame.height, frame.width, lines);
  }

 private:
  static constexpr data::Normalize kNormalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
  static constexpr data::Normalize kImageNet{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
};

}  // namespace

std::unique_ptr<Task> make_classify_task(const TaskOptions& options) {
  return std::make_unique<ClassifyTask>(options);
}

}  // namespace hpcnet::task
