// Model factory: the one place that maps a model name to its constructor, its task and its
// default input size. Adding a model is one line here (and its files in src/nn/models/).
#include <functional>

#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {
using Factory = std::function<std::shared_ptr<Module>(const ModelOptions&)>;
struct Entry {
  ModelInfo info;
  Factory make;
};
std::shared_ptr<Module> cifar_resnet(int64_t blocks, const ModelOptions& o) {
  return std::make_shared<CifarResNet>(std::vector<int64_t>{16, 32, 64}, blocks, false, true,
                                       o.num_classes);
}
const std::vector<Entry>& registry() {
  static const std::vector<Entry> r = {
      {{"lenet", "classify", 32, true},
       [](auto& o) { return std::make_shared<LeNet>(o.num_classes); }},
      {{"resnet20", "classify", 32}, [](auto& o) { return cifar_resnet(3, o); }},
      {{"resnet32", "classify", 32}, [](auto& o) { return cifar_resnet(5, o); }},
      {{"resnet56", "classify", 32}, [](auto& o) { return cifar_resnet(9, o); }},
      {{"resnet18", "classify", 32},
       [](auto& o) {
         return std::make_shared<CifarResNet>(std::vector<int64_t>{64, 128, 256, 512}, 2, true,
                                              false, o.num_classes);
       }},
      {{"unet_resnet18", "segment", 128, false, 32},
       [](auto& o) {
         return std::make_shared<Unet>(std::vector<int64_t>{2, 2, 2, 2}, o.num_classes);
       }},
      {{"unet_resnet34", "segment", 128, false, 32},
       [](auto& o) {
         return std::make_shared<Unet>(std::vector<int64_t>{3, 4, 6, 3}, o.num_classes);
       }},
      {{"yolov8n", "detect", 128, false, 32},
       [](auto& o) { return std::make_shared<YoloV8>(0.33, 0.25, 1024, o.num_classes); }},
      {{"yolov8s", "detect", 128, false, 32},
       [](auto& o) { return std::make_shared<YoloV8>(0.33, 0.50, 1024, o.num_classes); }},
      {{"deeplabv3_resnet50", "segment", 128},
       [](auto& o) { return std::make_shared<DeepLabV3>(o.num_classes, o.aux_loss); }},
  };
  return r;
}

const Entry& find(const std::string& name) {
  for (auto& e : registry())
    if (e.info.name == name) return e;
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model '" + name + "' (known: " + known + ")");
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
