// Model factory: the one place that maps a model name to its constructor.
#include <functional>

#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {
using Factory = std::function<std::shared_ptr<Module>(int64_t)>;
std::shared_ptr<Module> cifar_resnet(int64_t blocks, int64_t num_classes) {
  return std::make_shared<CifarResNet>(std::vector<int64_t>{16, 32, 64}, blocks, false, true,
                                       num_classes);
}
const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"lenet", [](int64_t nc) { return std::make_shared<LeNet>(nc); }},
      {"resnet20", [](int64_t nc) { return cifar_resnet(3, nc); }},
      {"resnet32", [](int64_t nc) { return cifar_resnet(5, nc); }},
      {"resnet56", [](int64_t nc) { return cifar_resnet(9, nc); }},
      {"resnet18",
       [](int64_t nc) {
         return std::make_shared<CifarResNet>(std::vector<int64_t>{64, 128, 256, 512}, 2, true,
                                              false, nc);
       }},
  };
  return r;
}
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (auto& [n, f] : registry()) out.push_back(n);
  return out;
}

std::shared_ptr<Module> make_model(const std::string& name, int64_t num_classes) {
  HPCNET_REQUIRE(num_classes >= 1, "number of classes must be positive");
  for (auto& [n, f] : registry())
    if (n == name) return f(num_classes);
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model '" + name + "' (known: " + known + ")");
}

}  // namespace hpcnet::nn
