// The object-detection task (Ultralytics' YOLOv8 semantics): targets are boxes per image; the loss
// is v8DetectionLoss (yolo_loss.h); the metric is pycocotools' COCOeval on the detections of
// class-aware NMS (conf 0.001, IoU 0.7, 300 per image, multi-label, as Ultralytics validates),
// with Ultralytics' per-class P and R; predict lists the boxes of NMS at conf 0.25 in the
// original image's pixels and draws them on the photograph.
#include "src/task/detect/detect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "hpcnet/functional.h"
#include "hpcnet/task.h"
#include "src/task/detect/coco_eval.h"
#include "src/task/detect/yolo_loss.h"

namespace hpcnet::task {
namespace detect {

std::vector<Detection> nms(const float* pred, int64_t A, int64_t nc, const NmsOptions& o) {
  // Candidates: (anchor, class) pairs over conf (multi-label), or each anchor's best class.
  std::vector<Detection> cand;
  for (int64_t a = 0; a < A; ++a) {
    float best = -1;
    int64_t best_c = 0;
    for (int64_t c = 0; c < nc; ++c) {
      const float s = pred[(4 + c) * A + a];
      if (o.multi_label) {
        if (s > o.conf) cand.push_back({a, c, s, {}});
      } else if (s > best) {
        best = s;
        best_c = c;
      }
    }
    if (!o.multi_label && best > o.conf) cand.push_back({a, best_c, best, {}});
  }
  std::stable_sort(cand.begin(), cand.end(),
                   [](const Detection& x, const Detection& y) { return x.score > y.score; });
  if (static_cast<int64_t>(cand.size()) > o.max_nms) cand.resize(static_cast<size_t>(o.max_nms));
  for (Detection& d : cand) {  // xywh -> xyxy
    const float cx = pred[0 * A + d.anchor], cy = pred[1 * A + d.anchor];
    const float w = pred[2 * A + d.anchor], h = pred[3 * A + d.anchor];
    d.box = {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
  }
  // Greedy, per class (torchvision.ops.nms on boxes offset by class: a box is dropped when its
  // IoU with a kept box of its class is above the threshold).
  std::vector<Detection> keep;
  std::vector<char> dead(cand.size(), 0);
  for (size_t i = 0; i < cand.size() && static_cast<int64_t>(keep.size()) < o.max_det; ++i) {
    if (dead[i]) continue;
    const Detection& k = cand[i];
    keep.push_back(k);
    const float ka = (k.box[2] - k.box[0]) * (k.box[3] - k.box[1]);
    for (size_t j = i + 1; j < cand.size(); ++j) {
      if (dead[j] || cand[j].cls != k.cls) continue;
      const auto& b = cand[j].box;
      const float iw = std::min(k.box[2], b[2]) - std::max(k.box[0], b[0]);
      const float ih = std::min(k.box[3], b[3]) - std::max(k.box[1], b[1]);
      if (iw <= 0 || ih <= 0) continue;
      const float inter = iw * ih;
      const float uni = ka + (b[2] - b[0]) * (b[3] - b[1]) - inter;
      if (inter / uni > o.iou) dead[j] = 1;
    }
  }
  return keep;
}

std::array<float, 4> unletterbox(const std::array<float, 4>& b, int64_t imgsz, int64_t height,
                                 int64_t width, int64_t stride) {
  const data::LetterboxGeometry g = data::letterbox_geometry(height, width, imgsz, stride);
  const double sx = static_cast<double>(width) / static_cast<double>(g.new_width);
  const double sy = static_cast<double>(height) / static_cast<double>(g.new_height);
  auto fx = [&](float v) {
    return static_cast<float>(std::clamp((v - g.left) * sx, 0.0, static_cast<double>(width)));
  };
  auto fy = [&](float v) {
    return static_cast<float>(std::clamp((v - g.top) * sy, 0.0, static_cast<double>(height)));
  };
  return {fx(b[0]), fy(b[1]), fx(b[2]), fy(b[3])};
}

namespace {

// Item i's original (height, width), and a box of its letterboxed input as a COCO box there.
std::array<int64_t, 2> original_size(const data::Batch& b, int64_t i) {
  if (b.sizes.empty()) return {b.images.size(2), b.images.size(3)};
  return b.sizes[static_cast<size_t>(i)];
}
CocoBox coco_box(const std::array<float, 4>& xyxy, int64_t imgsz, std::array<int64_t, 2> hw) {
  const auto q = unletterbox(xyxy, imgsz, hw[0], hw[1]);
  return {q[0], q[1], static_cast<double>(q[2]) - q[0], static_cast<double>(q[3]) - q[1]};
}

}  // namespace

std::vector<CocoGroundTruth> batch_ground_truths(const data::Batch& b, int64_t i, int64_t imgsz) {
  const int64_t id = b.indices[static_cast<size_t>(i)];
  const std::array<int64_t, 2> hw = original_size(b, i);
  std::vector<CocoGroundTruth> out;
  for (const data::Box& g : b.boxes[static_cast<size_t>(i)])
    out.push_back({id, g.cls, coco_box({g.x1, g.y1, g.x2, g.y2}, imgsz, hw),
                   g.area >= 0 ? std::optional<double>(g.area) : std::nullopt, g.crowd});
  return out;
}

}  // namespace detect

namespace {

// Predict's letterbox pads to a multiple of the Detect head's largest stride.
constexpr int64_t kLetterboxStride = detect::kStrides[detect::kNumLevels - 1];

using detect::CocoEvaluator;
using detect::CocoSummary;

// State: the serialized COCO evaluator (not additive: merged in rank order).
class DetectMetric : public Metric {
 public:
  DetectMetric(std::vector<std::string> classes, int64_t imgsz)
      : classes_(std::move(classes)), imgsz_(imgsz), eval_(category_ids(classes_.size())) {}

  void add(const Outputs& outputs, const data::Batch& b) override {
    HPCNET_CHECK(outputs.size() >= 2 && b.images.dim() == 4,
                 "detect metric: needs the head's "
                 "(boxes, scores) outputs");
    const int64_t H = b.images.size(2), W = b.images.size(3);
    const Tensor pred = detect::decode_predictions(outputs[0], outputs[1], H, W);
    const int64_t A = pred.size(2), nc = pred.size(1) - 4;
    detect::NmsOptions o;  // validation: conf 0.001, IoU 0.7, 300, multi-label
    o.multi_label = true;
    for (int64_t i = 0; i < b.size; ++i) {
      const int64_t id = b.indices[static_cast<size_t>(i)];
      eval_.add_image(id);
      for (const detect::CocoGroundTruth& g : detect::batch_ground_truths(b, i, imgsz_))
        eval_.add_ground_truth(g);
      const std::array<int64_t, 2> hw = detect::original_size(b, i);
      for (const detect::Detection& d :
           detect::nms(pred.data<float>() + i * (4 + nc) * A, A, nc, o))
        eval_.add_detection({id, d.cls, detect::coco_box(d.box, imgsz_, hw), d.score});
    }
    summary_.reset();
  }
  std::vector<double> state() const override { return eval_.serialize(); }
  void set_state(const std::vector<double>& s) override {
    eval_ = CocoEvaluator(category_ids(classes_.size()));
    if (!s.empty()) eval_.merge(s);
    summary_.reset();
  }
  bool additive() const override { return false; }
  void merge_state(const std::vector<double>& s) override {
    eval_.merge(s);
    summary_.reset();
  }
  const CocoSummary& summary() const {
    if (!summary_) summary_ = eval_.summarize();
    return *summary_;
  }
  // COCO's AP@[.5:.95] (mAP50-95) in percent; -1 (no ground truth) counts as 0.
  double value() const override { return percent(summary().stats[detect::kCocoStatAp]); }
  double map50() const { return percent(summary().stats[detect::kCocoStatAp50]); }
  std::string value_key() const override { return "val_map50_95"; }
  // Ultralytics' metrics/mAP50-95(B), mAP50(B), precision(B), recall(B), in percent.
  std::vector<std::string> value_keys() const override {
    return {"val_map50_95", "val_map50", "val_precision", "val_recall"};
  }
  std::vector<double> values() const override {
    const CocoSummary& s = summary();
    return {value(), map50(), percent(s.mean_precision), percent(s.mean_recall)};
  }
  std::string value_text() const override {
    char b[64];
    std::snprintf(b, sizeof b, "mAP50-95 %.2f%% mAP50 %.2f%%", value(), map50());
    return b;
  }
  int64_t count() const override { return static_cast<int64_t>(eval_.num_images()); }
  std::string report(const std::string& split) const override {
    const CocoSummary& s = summary();
    std::string out;
    char line[256];
    int64_t inst = 0;
    for (int64_t n : s.instances) inst += n;
    std::snprintf(line, sizeof line, "%22s %11s %11s %11s %11s %11s %11s\n", "Class", "Images",
                  "Instances", "Box(P", "R", "mAP50", "mAP50-95)");
    out += line;
    std::snprintf(line, sizeof line, "%22s %11lld %11lld %11.3g %11.3g %11.3g %11.3g\n", "all",
                  static_cast<long long>(count()), static_cast<long long>(inst), s.mean_precision,
                  s.mean_recall, fraction(s.stats[detect::kCocoStatAp50]),
                  fraction(s.stats[detect::kCocoStatAp]));
    out += line;
    for (size_t k = 0; k < classes_.size() && k < s.ap50.size(); ++k) {
      if (s.instances[k] == 0) continue;  // Ultralytics lists the classes with labels
      std::snprintf(line, sizeof line, "%22s %11lld %11lld %11.3g %11.3g %11.3g %11.3g\n",
                    classes_[k].c_str(), static_cast<long long>(s.images[k]),
                    static_cast<long long>(s.instances[k]), s.precision[k], s.recall[k], s.ap50[k],
                    s.ap50_95[k]);
      out += line;
    }
    out += detect::coco_summary_text(s);
    std::snprintf(line, sizeof line, "%s: mAP50-95: %.2f%% mAP50: %.2f%%\n", split.c_str(), value(),
                  map50());
    return out + line;
  }
  nlohmann::json to_json() const override {
    const CocoSummary& s = summary();
    nlohmann::json per = nlohmann::json::object();
    for (size_t k = 0; k < classes_.size() && k < s.ap50.size(); ++k)
      per[classes_[k]] = {{"images", s.images[k]},
                          {"instances", s.instances[k]},
                          {"precision", 100.0 * s.precision[k]},
                          {"recall", 100.0 * s.recall[k]},
                          {"map50", 100.0 * s.ap50[k]},
                          {"map50_95", 100.0 * s.ap50_95[k]}};
    // pycocotools' 12 stats in percent; its -1 (no ground truth in that range) stays -1.
    nlohmann::json coco = nlohmann::json::object();
    for (int k = 0; k < detect::kCocoStatCount; ++k)
      coco[detect::kCocoStatNames[k]] = s.stats[k] < 0 ? s.stats[k] : 100.0 * s.stats[k];
    return {{"images", count()},
            {"map50_95", value()},
            {"map50", map50()},
            {"precision", percent(s.mean_precision)},
            {"recall", percent(s.mean_recall)},
            {"coco", coco},
            {"per_class", per}};
  }
  void write_results(const std::string& path, const std::vector<int64_t>& image_ids,
                     const std::vector<int64_t>& category_ids) const override {
    std::vector<detect::CocoDetection> dets = eval_.detections();
    for (detect::CocoDetection& d : dets) {
      if (!image_ids.empty()) d.image_id = image_ids.at(static_cast<size_t>(d.image_id));
      if (!category_ids.empty())
        d.category_id = category_ids.at(static_cast<size_t>(d.category_id));
    }
    detect::write_coco_results(path, dets);
  }

 private:
  // A COCO statistic as Ultralytics' table prints it (a fraction) and as hpcnet writes it
  // (percent); -1 (no ground truth) counts as 0.
  static double fraction(double stat) { return std::max(0.0, stat); }
  static double percent(double stat) { return 100.0 * fraction(stat); }
  static std::vector<int64_t> category_ids(size_t n) {
    std::vector<int64_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  std::vector<std::string> classes_;
  int64_t imgsz_;
  CocoEvaluator eval_;
  mutable std::optional<CocoSummary> summary_;
};

class DetectTask : public Task {
 public:
  explicit DetectTask(const TaskOptions& o) : Task(o) {}
  std::string name() const override { return "detect"; }
  data::TargetKind target_kind() const override { return data::TargetKind::kBoxes; }
  // Ultralytics' cfg/default.yaml where it differs from the recipe's own defaults: yolov8n on a
  // detection dataset, 100 epochs at batch 16, optimizer auto (lr 0.01, momentum 0.937, Nesterov,
  // weight decay 5e-4), the linear schedule to lrf 0.01 after 3 warm-up epochs, parameter groups,
  // nominal batch 64, EMA 0.9999 with tau 2000, gradient clipping at 10, augmentation with mosaic 1
  // closed for the last 10 epochs. imgsz stays the model's (--imgsz 640 for Ultralytics' 640).
  Defaults train_defaults() const override {
    return {{"model", "yolov8n"},
            {"dataset", "detect"},
            {"epochs", 100},
            {"batch_size", 16},
            {"optimizer", "auto"},
            {"lr", 0.01},
            {"momentum", 0.937},
            {"nesterov", true},
            {"weight_decay", 5e-4},
            {"lr_schedule", "linear"},
            {"lrf", 0.01},
            {"warmup_epochs", 3},
            {"param_groups", true},
            {"nbs", 64},
            {"ema_decay", 0.9999},
            {"ema_tau", 2000.0},
            {"clip_grad_norm", 10.0},
            {"augment", "true"},
            {"mosaic", 1.0},
            {"close_mosaic", 10},
            {"log_every", 50}};
  }
  bool writes_results() const override { return true; }

  // Ultralytics' v8_transforms: Mosaic, RandomPerspective (RandomAffine), RandomHSV, RandomFlip;
  // pixels / 255 (no normalisation).
  data::Compose train_transform() const override { return train_transform(0, 0); }
  // With mosaic (p > 0) until the last close_mosaic epochs (Ultralytics 8.4.190: from epoch
  // epochs - close_mosaic on, so close_mosaic >= epochs means never).
  data::Compose train_transform(int64_t epoch, int64_t epochs) const override {
    if (options().augment.empty()) return eval_transform();
    const int64_t imgsz = options().imgsz;
    const DetectOptions& o = options().detect;
    const bool closed = o.close_mosaic > 0 && epoch >= epochs - o.close_mosaic;
    std::vector<data::Transform> t;
    if (o.mosaic > 0 && !closed) t.push_back(data::Mosaic{imgsz, o.mosaic});
    t.push_back(data::RandomAffine{imgsz, o.degrees, o.translate, o.scale, o.shear, 114});
    if (o.hsv_h > 0 || o.hsv_s > 0 || o.hsv_v > 0)
      t.push_back(data::RandomHSV{o.hsv_h, o.hsv_s, o.hsv_v});
    if (o.fliplr > 0) t.push_back(data::RandomHorizontalFlip{o.fliplr});
    t.push_back(data::ToTensor{});
    return data::Compose(t);
  }
  data::Compose eval_transform() const override {
    return data::Compose({data::Letterbox{options().imgsz, 114}, data::ToTensor{}});
  }
  // Ultralytics' predict: LetterBox(auto=True, stride=32), one shape per batch.
  data::Compose predict_transform() const override {
    return data::Compose({data::Letterbox{options().imgsz, 114, kLetterboxStride}, data::ToTensor{}});
  }
  int64_t val_batch_size(int64_t train_batch_size) const override {
    return 2 * train_batch_size;
  }
  // v8DetectionLoss: (box + cls + dfl) x B, the quantity Ultralytics backpropagates.
  Tensor loss(const Outputs& outputs, const data::Batch& batch) const override {
    return v8_loss(outputs, batch, {});
  }
  // The logged loss per image: box + cls + dfl (the sum of Ultralytics' three printed losses).
  double loss_for_log(double loss, const data::Batch& batch) const override {
    return batch.size > 0 ? loss / static_cast<double>(batch.size) : loss;
  }
  Tensor train_loss(const Outputs& outputs, const data::Batch& batch,
                    const StepRanks& ranks) const override {
    detect::LossOptions o;
    if (ranks.world > 1 && ranks.sum) {
      o.rank_sum = ranks.sum;
      o.world = ranks.world;
      o.device_rank_sum = ranks.device_sum;
    }
    return v8_loss(outputs, batch, o);
  }
  // world^2 B (parts of this rank) / (world B): its mean over the ranks is the global parts' sum.
  double train_loss_for_log(double loss, const data::Batch& batch,
                            const StepRanks& ranks) const override {
    if (ranks.world <= 1 || !ranks.sum) return loss_for_log(loss, batch);
    return batch.size > 0 ? loss / static_cast<double>(batch.size * ranks.world) : loss;
  }
  std::vector<std::string> loss_part_names() const override {
    return {"box_loss", "cls_loss", "dfl_loss"};
  }
  std::vector<double> last_loss_parts() const override {
    if (!has_parts_) return {};
    if (last_parts_tensor_.defined()) {  // read once, when asked (a wait for the device)
      const std::vector<double> v = last_parts_tensor_.to_vector_f64();
      for (size_t k = 0; k < 3; ++k) last_parts_[k] = v[k] * parts_scale_;
      last_parts_tensor_ = Tensor();
    }
    return {last_parts_[0], last_parts_[1], last_parts_[2]};
  }
  std::pair<Tensor, double> last_loss_parts_unread() const override {
    return {last_parts_tensor_, parts_scale_};
  }
  std::unique_ptr<Metric> make_metric(const std::vector<std::string>& classes) const override {
    return std::make_unique<DetectMetric>(classes, options().imgsz);
  }
  // Ultralytics' exported output: Detect._inference of the head's raw outputs.
  Tensor export_output(nn::Module& model, const Tensor& images) const override {
    const Outputs out = model.forward_all(images);
    HPCNET_REQUIRE(out.size() >= 2,
                   "detect: the model must return the Detect head's (boxes, scores) outputs");
    return detect::decode_predictions(out[0], out[1], images.size(2), images.size(3));
  }
  std::vector<std::pair<std::string, std::string>> export_metadata() const override {
    return {{"stride", std::to_string(detect::kStrides[detect::kNumLevels - 1])},
            {"output",
             "(N, 4 + nc, anchors): box centre x, y, width, height in input pixels, then the "
             "nc class scores (sigmoid); no NMS"}};
  }
  Prediction predict(const Outputs& outputs, int64_t i, const std::vector<std::string>& classes,
                     const PredictOptions& po) const override {
    const std::vector<detect::Detection> dets = detections(outputs, i, po);
    Prediction p;
    p.json["boxes"] = nlohmann::json::array();
    char buf[160];
    std::snprintf(buf, sizeof buf, " %zu object%s", dets.size(), dets.size() == 1 ? "" : "s");
    p.line = buf;
    int shown = 0;
    for (const detect::Detection& d : dets) {
      const std::string& name = classes.at(static_cast<size_t>(d.cls));
      p.json["boxes"].push_back({{"class", d.cls},
                                 {"name", name},
                                 {"score", d.score},
                                 {"box", {d.box[0], d.box[1], d.box[2], d.box[3]}}});
      if (shown++ < po.top) {
        std::snprintf(buf, sizeof buf, "%s %s %.2f [%.0f %.0f %.0f %.0f]", shown > 1 ? "," : ":",
                      name.c_str(), d.score, d.box[0], d.box[1], d.box[2], d.box[3]);
        p.line += buf;
      }
    }
    return p;
  }
  void annotate(data::Image& frame, const Outputs& outputs, int64_t i,
                const std::vector<std::string>& classes, const PredictOptions& po) const override {
    PredictOptions o = po;
    o.height = frame.height;
    o.width = frame.width;
    const auto palette = data::class_palette(static_cast<int64_t>(classes.size()) + 1);
    std::vector<data::LabeledBox> boxes;
    for (const detect::Detection& d : detections(outputs, i, o)) {  // most confident first
      char label[96];
      std::snprintf(label, sizeof label, "%s %.2f", classes.at(static_cast<size_t>(d.cls)).c_str(),
                    d.score);
      boxes.push_back({d.box[0], d.box[1], d.box[2], d.box[3],
                       palette[static_cast<size_t>(d.cls) + 1], label});
    }
    data::draw_boxes(frame.pixels.data(), frame.height, frame.width, boxes);
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> pictures(
      const data::Image& im, const Outputs& outputs, int64_t i,
      const std::vector<std::string>& classes, const PredictOptions& po) const override {
    data::Image drawn = im;
    annotate(drawn, outputs, i, classes, po);
    return {{"_boxes.png", data::encode_png_rgb(drawn.pixels.data(), im.height, im.width)}};
  }
  std::optional<std::string> label_file(const Prediction& prediction, int64_t height,
                                        int64_t width) const override {
    std::string rows;
    char row[160];
    for (const auto& bx : prediction.json.at("boxes")) {
      const double x1 = bx["box"][0], y1 = bx["box"][1], x2 = bx["box"][2], y2 = bx["box"][3];
      const double w = static_cast<double>(width), h = static_cast<double>(height);
      std::snprintf(row, sizeof row, "%lld %.6f %.6f %.6f %.6f %.5f\n",
                    static_cast<long long>(bx["class"].get<int64_t>()), (x1 + x2) / 2 / w,
                    (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h, bx["score"].get<double>());
      rows += row;
    }
    return rows;
  }

 private:
  // NMS at predict settings; boxes in the original image's pixels (po.height x po.width; the
  // letterboxed input's when 0).
  std::vector<detect::Detection> detections(const Outputs& outputs, int64_t i,
                                            const PredictOptions& po) const {
    const int64_t A = outputs.at(0).size(2);
    const int64_t side = options().imgsz;
    const int64_t H = po.input_height > 0 ? po.input_height : side;
    const int64_t W = po.input_width > 0 ? po.input_width : side;
    HPCNET_CHECK(A == detect::make_anchors(H, W).size(),
                 "detect: outputs do not fit an input of " + std::to_string(H) + "x" +
                     std::to_string(W));
    const int64_t nc = outputs.at(1).size(1);
    detect::NmsOptions o;
    o.conf = po.conf;
    o.iou = po.iou;
    o.max_det = po.max_det;
    // Only the anchors that can pass conf are decoded (the same NMS as on the whole decoding).
    const detect::Candidates c =
        detect::decode_candidates(outputs[0], outputs[1], H, W, i, po.conf);
    const int64_t M = static_cast<int64_t>(c.anchor.size());
    std::vector<detect::Detection> d = detect::nms(c.pred.data(), M, nc, o);
    for (detect::Detection& x : d) x.anchor = c.anchor[static_cast<size_t>(x.anchor)];
    if (po.height > 0 && po.width > 0)
      for (detect::Detection& x : d) {
        // A square input is Letterbox's square (also when predict's stride gave one).
        const int64_t stride = H == side && W == side ? 0 : kLetterboxStride;
        x.box = detect::unletterbox(x.box, side, po.height, po.width, stride);
      }
    return d;
  }

  // v8DetectionLoss's total for loss() and train_loss(); its three parts are kept for
  // last_loss_parts(), as train_loss_for_log scales the total: on world ranks world x this rank's
  // (whose mean over the ranks is the global batch's part).
  Tensor v8_loss(const Outputs& outputs, const data::Batch& batch,
                 const detect::LossOptions& o) const {
    HPCNET_REQUIRE(outputs.size() >= 2,
                   "detect: the model must return the Detect head's "
                   "(boxes, scores) outputs");
    const int64_t H = batch.images.size(2), W = batch.images.size(3);
    detect::LossResult r = detect::v8_detection_loss(outputs[0], outputs[1], H, W,
                                                     detect::targets_of(batch.boxes), o);
    parts_scale_ = o.rank_sum ? static_cast<double>(o.world) : 1.0;
    last_parts_tensor_ = r.parts;
    has_parts_ = true;
    return r.total;
  }
  mutable std::array<double, 3> last_parts_{};  // box, cls, dfl of the last loss computed
  mutable Tensor last_parts_tensor_;            // the same, on the loss's device, until read
  mutable double parts_scale_ = 1.0;
  mutable bool has_parts_ = false;
};

}  // namespace

std::unique_ptr<Task> make_detect_task(const TaskOptions& options) {
  return std::make_unique<DetectTask>(options);
}

}  // namespace hpcnet::task
