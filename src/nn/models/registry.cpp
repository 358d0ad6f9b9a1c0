// Model factory: the one place that maps a model name to its constructor, its task and its
// default input size. Adding a model is one line here (and its files in src/nn/models/).
#include <functional>
#include <map>
#include <mutex>

#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {
using Factory = std::function<std::shared_ptr<Module>(const ModelOptions&)>;
struct Entry {
  ModelInfo info;
  Factory make;
};
// resnet20/32/56: widths 16/32/64, option-A shortcuts, Kaiming initialisation.
std::shared_ptr<Module> cifar_resnet(int64_t blocks_per_stage, const ModelOptions& options) {
  return std::make_shared<CifarResNet>(std::vector<int64_t>{16, 32, 64}, blocks_per_stage,
                                       /*projection=*/false, /*kaiming_init=*/true,
                                       options.num_classes);
}
std::shared_ptr<Module> torchvision_resnet(const std::vector<int64_t>& blocks, bool bottleneck,
                                           const ModelOptions& options) {
  return std::make_shared<TorchvisionResNet>(blocks, bottleneck, options.num_classes,
                                             options.zero_init_residual);
}
// A detection model built from a YOLO description at one scale.
ModelInfo yolo_info(const std::string& name) {
  return {.name = name, .task = "detect", .imgsz = 128, .size_multiple = 32};
}
Entry yolo_entry(const char* name, YoloDescription (*describe)(), const char* scale) {
  return {.info = yolo_info(name), .make = [describe, scale](const ModelOptions& o) {
            YoloDescription d = describe();
            d.scale = scale;
            return std::make_shared<YoloModel>(d, o.num_classes);
          }};
}
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {.info = {.name = "lenet",
                 .task = "classify",
                 .imgsz = 32,
                 .fixed_size = true,
                 .classifier = "fc3"},
       .make = [](auto& o) { return std::make_shared<LeNet>(o.num_classes); }},
      {.info = {.name = "resnet20", .task = "classify", .imgsz = 32, .classifier = "linear"},
       .make = [](auto& o) { return cifar_resnet(3, o); }},
      {.info = {.name = "resnet32", .task = "classify", .imgsz = 32, .classifier = "linear"},
       .make = [](auto& o) { return cifar_resnet(5, o); }},
      {.info = {.name = "resnet56", .task = "classify", .imgsz = 32, .classifier = "linear"},
       .make = [](auto& o) { return cifar_resnet(9, o); }},
      // Called "resnet18" until torchvision's ResNets came (read_run_file renames old files).
      {.info = {.name = "cifar_resnet18", .task = "classify", .imgsz = 32, .classifier = "linear"},
       .make =
           [](auto& o) {
             return std::make_shared<CifarResNet>(std::vector<int64_t>{64, 128, 256, 512}, 2,
                                                  /*projection=*/true, /*kaiming_init=*/false,
                                                  o.num_classes);
           }},
      // torchvision.models.resnet18/34/50/101 (ImageNet: 7x7 stride-2 stem and max pool).
      {.info = {.name = "resnet18",
                 .task = "classify",
                 .imgsz = 224,
                 .classifier = "fc",
                 .unnamed_eval_policy = "imagenet"},
       .make = [](auto& o) { return torchvision_resnet({2, 2, 2, 2}, false, o); }},
      {.info = {.name = "resnet34",
                 .task = "classify",
                 .imgsz = 224,
                 .classifier = "fc",
                 .unnamed_eval_policy = "imagenet"},
       .make = [](auto& o) { return torchvision_resnet({3, 4, 6, 3}, false, o); }},
      {.info = {.name = "resnet50",
                 .task = "classify",
                 .imgsz = 224,
                 .classifier = "fc",
                 .unnamed_eval_policy = "imagenet"},
       .make = [](auto& o) { return torchvision_resnet({3, 4, 6, 3}, true, o); }},
      {.info = {.name = "resnet101",
                 .task = "classify",
                 .imgsz = 224,
                 .classifier = "fc",
                 .unnamed_eval_policy = "imagenet"},
       .make = [](auto& o) { return torchvision_resnet({3, 4, 23, 3}, true, o); }},
      {.info = {.name = "unet_resnet18", .task = "segment", .imgsz = 128, .size_multiple = 32},
       .make =
           [](auto& o) {
             return std::make_shared<Unet>(std::vector<int64_t>{2, 2, 2, 2}, o.num_classes);
           }},
      {.info = {.name = "unet_resnet34", .task = "segment", .imgsz = 128, .size_multiple = 32},
       .make =
           [](auto& o) {
             return std::make_shared<Unet>(std::vector<int64_t>{3, 4, 6, 3}, o.num_classes);
           }},
      // YOLOv8 and YOLO11 scales from hpcnet's descriptions of Ultralytics' yolov8.yaml and
      // yolo11.yaml (yolo_describe.cpp); a path ending in .yaml/.yml is a model YAML (find()).
      yolo_entry("yolov8n", yolov8_description, "n"),
      yolo_entry("yolov8s", yolov8_description, "s"),
      yolo_entry("yolov8m", yolov8_description, "m"),
      yolo_entry("yolov8l", yolov8_description, "l"),
      yolo_entry("yolov8x", yolov8_description, "x"),
      yolo_entry("yolo11n", yolo11_description, "n"),
      yolo_entry("yolo11s", yolo11_description, "s"),
      yolo_entry("yolo11m", yolo11_description, "m"),
      yolo_entry("yolo11l", yolo11_description, "l"),
      yolo_entry("yolo11x", yolo11_description, "x"),
      {.info = {.name = "deeplabv3_resnet50", .task = "segment", .imgsz = 128},
       .make = [](auto& o) { return std::make_shared<DeepLabV3>(o.num_classes, o.aux_loss); }},
  };
  return entries;
}

// A model YAML (a path ending in .yaml or .yml): read when first named (InputError for a file
// that cannot be read or parsed), its model built from the file at each make_model.
const Entry& yaml_entry(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, Entry> entries;
  std::lock_guard<std::mutex> lock(mu);
  auto it = entries.find(path);
  if (it != entries.end()) return it->second;
  read_yolo_yaml(path);  // fails here for a missing or malformed file
  Entry e{.info = yolo_info(path), .make = [path](const ModelOptions& o) {
            return std::make_shared<YoloModel>(read_yolo_yaml(path), o.num_classes);
          }};
  return entries.emplace(path, std::move(e)).first->second;
}

const Entry& find(const std::string& name) {
  for (auto& e : registry())
    if (e.info.name == name) return e;
  if (is_yolo_yaml_path(name)) return yaml_entry(name);
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model '" + name + "' (known: " + known +
                   ", or a YOLO model YAML: a path ending in .yaml)");
}
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (auto& e : registry()) out.push_back(e.info.name);
  return out;
}

const ModelInfo& model_info(const std::string& name) { return find(name).info; }

std::shared_ptr<Module> make_model(const std::string& name, const ModelOptions& options) {
  HPCNET_REQUIRE(options.num_classes >= 1, "number of classes must be positive");
  return find(name).make(options);
}

}  // namespace hpcnet::nn
