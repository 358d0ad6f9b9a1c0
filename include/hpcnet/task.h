// Tasks: what a model is trained to do. A task owns everything that depends on what a label is:
// which target its datasets carry, its default transforms (which move the target with the
// pixels), its loss, its metric (a state of numbers that add up across ranks, so evaluation is
// distributed the same way for every task), its predict output (a JSON object and a text line per
// image, and a picture where one helps) and the test-time augmentation it supports. The training
// loop, evaluation and the CLI call a Task and never look inside a target.
//
// Layering: task sits above nn, optim and data, below train and cli. Each task lives in
// src/task/<name>/ and is registered by one line in src/task/tasks.inc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/nn.h"

namespace hpcnet::task {

using nn::Outputs;

// Each task's own options, declared once: these are their defaults for API callers (and
// train::TrainConfig's, which takes them from here); a fresh `hpcnet train` run of the task may
// start from others, its Task::train_defaults().
struct ClassifyOptions {
  int64_t cutout = 0;            // Cutout(size) after the other transforms (0 = off)
  double label_smoothing = 0.0;  // cross-entropy label smoothing
};
struct SegmentOptions {
  std::string loss = "ce";              // ce, dice or ce+dice (their sum)
  std::vector<double> class_weights;    // per-class loss weights (empty: all 1)
  double aux_weight = 0.5;              // weight of an auxiliary head's loss
  double scale_min = 1, scale_max = 1;  // RandomScale range when augmenting (1, 1 = off)
  // Normalize with ImageNet's mean and std (an encoder with ImageNet weights, as smp's
  // preprocessing for them) instead of 0.5 and 0.5.
  bool imagenet_normalize = false;
};
// Augmenting (Ultralytics' hyperparameters): Mosaic, RandomAffine, RandomHSV, flip.
struct DetectOptions {
  double degrees = 0, translate = 0.1, scale = 0.5, shear = 0;
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  double fliplr = 0.5;
  double mosaic = 0;         // Mosaic probability
  int64_t close_mosaic = 0;  // no mosaic in the last this many epochs
};

// What a task is made with: the options every task reads, and each task's own (a task reads only
// its own struct; train::task_options fills them from the recipe).
struct TaskOptions {
  int64_t imgsz = 32;  // square input size of the model
  // The training augmentation: "" none, "default" the task's own, or a policy the task names
  // (Task::augment_policies(); classify: "cifar", "imagenet"; eval_transform follows the policy:
  // imagenet evaluates as Resize(imgsz * 256 / 224) + CenterCrop(imgsz) with ImageNet's mean and
  // std).
  std::string augment;
  ClassifyOptions classify;
  SegmentOptions segment;
  DetectOptions detect;
};

// A metric summed over batches. Its whole state is a vector of numbers that add up: the state of
// several shards (ranks) summed elementwise and set_state()d gives the metric of all the data.
class Metric {
 public:
  virtual ~Metric() = default;
  // Adds one batch: the model's outputs for batch.images (in eval mode) and the batch's targets.
  virtual void add(const Outputs& outputs, const data::Batch& batch) = 0;
  virtual std::vector<double> state() const = 0;
  // Requires s.size() == state().size() (InputError otherwise).
  virtual void set_state(const std::vector<double>& s) = 0;
  // Whether states add up elementwise (counts, a confusion matrix). A metric whose state does not
  // (a COCO evaluation needs every detection) returns false: states are then gathered, set_state
  // ({}) empties the metric and merge_state() adds each rank's in rank order.
  virtual bool additive() const { return true; }
  virtual void merge_state(const std::vector<double>& s);
  // The headline number, higher is better, in percent like every number a metric writes
  // (classify: accuracy; segment: mIoU; detect: mAP50-95), and its name in metrics.jsonl
  // ("val_accuracy").
  virtual double value() const = 0;
  virtual std::string value_key() const = 0;
  // Every number of an epoch record, in percent, the headline first: value_keys()[i] is
  // values()[i]'s name (detect: val_map50_95, val_map50, val_precision, val_recall). Only the
  // headline unless a task says more; value_keys() needs no data.
  virtual std::vector<std::string> value_keys() const { return {value_key()}; }
  virtual std::vector<double> values() const { return {value()}; }
  // The headline for the epoch line ("val_accuracy 52.10%", "mAP50-95 26.10% mAP50 42.50%").
  virtual std::string value_text() const;
  // detect: the detections as a COCO results file, image i's id image_ids[i] (the dataset order;
  // empty: i) and class k's category category_ids[k] (empty: k). InputError for other tasks.
  virtual void write_results(const std::string& path, const std::vector<int64_t>& image_ids,
                             const std::vector<int64_t>& category_ids) const;
  // The items (images) added.
  virtual int64_t count() const = 0;
  // `hpcnet eval`'s text (the summary line last) and its --json object.
  virtual std::string report(const std::string& split) const = 0;
  virtual nlohmann::json to_json() const = 0;
};

// How predict shows one image's result.
struct PredictOptions {
  int top = 3;  // classify: classes listed per image
  // detect (Ultralytics' predict defaults): boxes scoring above conf after NMS at IoU iou, at
  // most max_det, in the pixels of a height x width original (0: of the model's input).
  float conf = 0.25f, iou = 0.7f;
  int64_t max_det = 300;
  int64_t height = 0, width = 0;
  // The model input's size (predict_transform()'s output; 0: options().imgsz square).
  int64_t input_height = 0, input_width = 0;
};
struct Prediction {
  nlohmann::json json;  // one object, written as one line by `predict --json`
  std::string line;     // the text line after "IMAGE:"
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual data::TargetKind target_kind() const = 0;
  const TaskOptions& options() const { return options_; }

  // ---- hooks of the recipe and the CLI (which never test a task's name)
  // The defaults of a fresh `hpcnet train` run of the task (nothing else given) where they differ
  // from train::TrainConfig's (the classify tutorial's), by recipe key (the config-file key of
  // train::recipe_fields(), "batch_size"), each value JSON of the field's type: the model --task
  // alone trains, what --data is read as, and for detect Ultralytics' cfg/default.yaml.
  using Defaults = std::vector<std::pair<std::string, nlohmann::json>>;
  virtual Defaults train_defaults() const { return {}; }
  // The --augment policies besides true and false the task knows (TaskOptions::augment; classify:
  // cifar, imagenet); none unless it says.
  virtual std::vector<std::string> augment_policies() const { return {}; }
  // Whether its metric writes a results file (Metric::write_results; detect: COCO's).
  virtual bool writes_results() const { return false; }

  // Training transforms (augmentation per options()) and evaluation / predict transforms; both
  // bring an image of any size to options().imgsz.
  virtual data::Compose train_transform() const = 0;
  // The training transforms of epoch `epoch` (0-based) of `epochs`: train_transform(), or for
  // detect without Mosaic in the last close_mosaic epochs. The loop rebuilds its loader when
  // they change.
  virtual data::Compose train_transform(int64_t epoch, int64_t epochs) const {
    return train_transform();
  }
  virtual data::Compose eval_transform() const = 0;
  // What `hpcnet predict` feeds the model: eval_transform(), or for detect Ultralytics' predict
  // letterbox (only padded to a multiple of 32: a 640x480 frame stays 640x480).
  virtual data::Compose predict_transform() const { return eval_transform(); }
  // The shorter side JPEGs may be decoded down to (data::set_decode_min_side) without changing
  // what the transforms need: 0 (full size) unless the task says otherwise (classify: imgsz, or
  // imgsz * 256 / 224 for the imagenet policy, the evaluation resize).
  virtual int64_t decode_min_side() const { return 0; }
  // The batch size of the training loop's validation after each epoch, given --batch-size: 500,
  // for detect 2 x batch as Ultralytics' trainer (its val loader) uses, for segment the batch.
  virtual int64_t val_batch_size(int64_t train_batch_size) const { return 500; }
  // The scalar loss of a batch (autograd graph attached), outputs = model.forward_all(images).
  virtual Tensor loss(const Outputs& outputs, const data::Batch& batch) const = 0;
  // The loss as logged (loss lines, train_loss, val_loss) from loss().item(): the same, or for
  // detect the per-image sum of its three parts (Ultralytics backpropagates them times B).
  virtual double loss_for_log(double loss, const data::Batch& batch) const { return loss; }
  // A training step's loss on one rank of a data-parallel job of `world` ranks (`sum` adds
  // doubles over them; world 1 and no sum in one process), whose gradients the loop averages over
  // the ranks: loss(), or for a loss normalised by a quantity of the whole batch (detect: the
  // target-score sum) the form that makes N ranks at batch B take one process's steps at batch
  // N x B. train_loss_for_log is its logged value, whose mean over the ranks is the global
  // batch's loss_for_log.
  struct StepRanks {
    int world = 1;
    F::RankSum sum;
    // Where the ranks reduce on their GPUs (NCCL): sums a tensor on the device over them, in
    // place, without the host waiting (detect's target-score sum then never leaves the GPU).
    std::function<void(Tensor&)> device_sum;
  };
  virtual Tensor train_loss(const Outputs& outputs, const data::Batch& batch,
                            const StepRanks& ranks) const {
    return loss(outputs, batch);
  }
  virtual double train_loss_for_log(double loss, const data::Batch& batch,
                                    const StepRanks& ranks) const {
    return loss_for_log(loss, batch);
  }
  // The names of the logged loss's parts, where it has several (detect: "box_loss", "cls_loss",
  // "dfl_loss", Ultralytics' loss items); none for a loss of one part.
  virtual std::vector<std::string> loss_part_names() const { return {}; }
  // The parts of the loss that the last loss() or train_loss() call on this object computed,
  // scaled as loss_for_log / train_loss_for_log scale its total (their sum is the logged loss);
  // loss_part_names().size() numbers, or none before the first call. One caller at a time.
  virtual std::vector<double> last_loss_parts() const { return {}; }
  // The same parts, not yet read: a (loss_part_names().size(),) tensor on the loss's device and the
  // factor last_loss_parts() would multiply them by; an undefined tensor when the task has none
  // or they were read. Lets the trainer read them later, with the losses (no wait per step).
  virtual std::pair<Tensor, double> last_loss_parts_unread() const { return {Tensor(), 1.0}; }
  virtual std::unique_ptr<Metric> make_metric(const std::vector<std::string>& classes) const = 0;
  // The outputs used for evaluation and prediction of images (N, 3, H, W) on the model's device,
  // the model in eval mode: model.forward_all(images), or with flip_tta the task's test-time
  // augmentation with the left-right mirror (InputError where the task has none).
  virtual Outputs infer(nn::Module& model, const Tensor& images, bool flip_tta) const;
  // `hpcnet export`: the ONNX model's output for images (N, 3, H, W), the model in eval mode:
  // model.forward(images) (classify: the logits; segment: the main head's), for detect the
  // decoded predictions (N, 4 + nc, A) of Ultralytics' exported models (rows cx, cy, w, h in input
  // pixels, then the nc sigmoid class scores).
  virtual Tensor export_output(nn::Module& model, const Tensor& images) const {
    return model.forward(images);
  }
  // Metadata the task adds to an exported model (detect: Ultralytics' "stride", the layout).
  virtual std::vector<std::pair<std::string, std::string>> export_metadata() const { return {}; }
  // Image i of a predicted batch (outputs on the CPU) for `hpcnet predict`.
  virtual Prediction predict(const Outputs& outputs, int64_t i,
                             const std::vector<std::string>& classes,
                             const PredictOptions& options) const = 0;
  // Draws image i's prediction on `frame` (the decoded input, of any size) in place: the frames
  // of an annotated video (`predict --save` on a video). detect: the boxes with class and score;
  // segment: the class overlay; classify (the default): the prediction's line of text.
  virtual void annotate(data::Image& frame, const Outputs& outputs, int64_t i,
                        const std::vector<std::string>& classes,
                        const PredictOptions& options) const;
  // Pictures of image i's prediction for `predict --save`, as PNG files in memory by file-name
  // suffix ("_mask.png"), at the size of `original` (the decoded input image, of any size: the
  // model saw it through eval_transform()). None for tasks whose result is a line of text.
  virtual std::vector<std::pair<std::string, std::vector<uint8_t>>> pictures(
      const data::Image& original, const Outputs& outputs, int64_t i,
      const std::vector<std::string>& classes, const PredictOptions& options) const {
    return {};
  }
  // The text file of image i's prediction for `predict --save` (NAME.txt), from its Prediction and
  // the original image's size; none where the task writes none (detect: YOLO label rows, "class
  // cx cy w h conf", normalised to the image).
  virtual std::optional<std::string> label_file(const Prediction& prediction, int64_t height,
                                                int64_t width) const {
    return std::nullopt;
  }

 protected:
  explicit Task(TaskOptions options) : options_(options) {}

 private:
  TaskOptions options_;
};

// Tasks by name ("classify"); InputError listing the known names for any other.
std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options = {});
std::vector<std::string> task_names();

// The task's loss over an evaluation pass, as numbers that add up across shards (ranks) like a
// metric's state: sum = the sum over batches of (the batch's loss x its images), count = images.
// parts: the same sums of Task::last_loss_parts() (empty for a loss of one part).
struct LossSum {
  double sum = 0, count = 0;
  std::vector<double> parts;
  // The mean loss per image (a batch's loss weighted by its size); NaN when count is 0.
  double mean() const;
  // The mean of each part per image, as mean(); NaN when count is 0.
  std::vector<double> part_means() const;
};

// Runs the model in eval mode (no gradients) over one pass of the loader and returns the metric
// (the model's mode is restored). flip_tta: Task::infer's test-time augmentation. With loss, each
// batch's Task::loss of the evaluated outputs is also added to *loss (which is not reset first).
// on_batch, when given, is called after each batch with the number of batches done (a progress
// bar).
std::unique_ptr<Metric> evaluate(const Task& task, nn::Module& model, data::DataLoader& loader,
                                 bool flip_tta = false, LossSum* loss = nullptr,
                                 const std::function<void(int64_t)>& on_batch = {});

// x (N, C, H, W), row-major, float32 or float64, on the CPU -> the images mirrored left-right.
Tensor flip_left_right(const Tensor& x);

}  // namespace hpcnet::task
