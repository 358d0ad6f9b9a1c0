// --encoder-weights (see nn.h, load_encoder_weights): a torchvision ImageNet ResNet's state_dict
// into a segmentation model's encoder, as smp's encoder_weights="imagenet" loads it (its
// ResNetEncoder.load_state_dict drops fc.weight and fc.bias, then loads strictly) and as
// torchvision's weights_backbone fills DeepLabV3's backbone (the ResNet less avgpool and fc).
#include <set>

#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {

using State = std::map<std::string, Tensor>;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The torchvision ResNet a state dict holds, from its blocks per layer and block type
// ("resnet50"), or "" when it is none of resnet18/34/50/101/152.
std::string resnet_of(const State& s) {
  std::vector<int64_t> blocks;
  for (int layer = 1; layer <= 4; ++layer) {
    int64_t n = 0;
    while (s.count("layer" + std::to_string(layer) + "." + std::to_string(n) + ".conv1.weight"))
      ++n;
    blocks.push_back(n);
  }
  const bool bottleneck = s.count("layer1.0.conv3.weight") != 0;
  const struct {
    std::vector<int64_t> blocks;
    bool bottleneck;
    const char* name;
  } known[] = {{{2, 2, 2, 2}, false, "resnet18"},
               {{3, 4, 6, 3}, false, "resnet34"},
               {{3, 4, 6, 3}, true, "resnet50"},
               {{3, 4, 23, 3}, true, "resnet101"},
               {{3, 8, 36, 3}, true, "resnet152"}};
  for (const auto& k : known)
    if (k.blocks == blocks && k.bottleneck == bottleneck) return k.name;
  return "";
}

// "'a', 'b' (and 3 more)": the first two names of a list.
std::string some(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 2; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 2) s += " (and " + std::to_string(names.size() - 2) + " more)";
  return s;
}

// Why `state` does not fit the tensors `mine` of the module called `encoder` (names relative to
// it), or "" when it fits exactly.
std::string mismatch(const NamedTensors& mine, const State& state, const std::string& encoder) {
  std::vector<std::string> missing, extra;
  std::string shape;
  std::set<std::string> seen;
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    seen.insert(name);
    if (shape.empty() && it->second.shape() != t.shape())
      shape = "'" + name + "' has shape " + shape_str(it->second.shape()) + ", the " + encoder +
              "'s " + shape_str(t.shape());
  }
  for (const auto& [name, t] : state)
    if (!seen.count(name)) extra.push_back(name);
  std::string why;
  auto add = [&](const std::string& part) { why += (why.empty() ? "" : "; ") + part; };
  if (!missing.empty()) add("missing " + some(missing));
  if (!extra.empty()) add("unexpected " + some(extra));
  if (!shape.empty()) add(shape);
  return why;
}

}  // namespace

std::string load_encoder_weights(Module& model, const std::string& model_name, State state,
                                 const std::string& source) {
  const ModelInfo& info = model_info(model_name);
  if (info.encoder.empty()) {
    std::string with;
    for (const std::string& n : model_names())
      if (!model_info(n).encoder.empty()) with += (with.empty() ? "" : ", ") + n;
    throw InputError(source + ": model " + model_name +
                     " has no ImageNet ResNet encoder to load (models with one: " + with + ")");
  }
  Module* encoder = nullptr;
  for (auto& [name, m] : model.named_modules())
    if (name == info.encoder) encoder = m;
  HPCNET_CHECK(encoder, model_name + " has no module '" + info.encoder + "'");
  const std::string want = info.encoder_resnet;
  // fc is torchvision's classifier: the encoder has none (smp's encoder deletes it).
  for (auto it = state.begin(); it != state.end();)
    it = starts_with(it->first, "fc.") ? state.erase(it) : std::next(it);
  if (!state.count("conv1.weight")) {
    const std::string first = state.empty() ? "none" : "'" + state.begin()->first + "'";
    throw InputError(source + ": not a torchvision ResNet state_dict (no conv1.weight; first key " +
                     first + "); " + model_name + "'s " + info.encoder + " takes torchvision's " +
                     want + " (a model file of a whole network goes to --weights)");
  }
  NamedTensors mine = encoder->named_parameters();
  for (auto& b : encoder->named_buffers()) mine.push_back(b);
  if (const std::string why = mismatch(mine, state, info.encoder); !why.empty()) {
    const std::string held = resnet_of(state);
    if (!held.empty() && held != want)
      throw InputError(source + ": holds torchvision's " + held + ", " + model_name + "'s " +
                       info.encoder + " is a " + want + " (" + why + ")");
    throw InputError(source + ": not torchvision's " + want + " state_dict that " + model_name +
                     "'s " + info.encoder + " takes: " + why);
  }
  encoder->load_state_dict(state);
  return source + ": torchvision's " + want + " loaded into " + model_name + "'s " + info.encoder +
         ".* (" + std::to_string(state.size()) + " tensors; fc left out, the rest initialised)";
}

}  // namespace hpcnet::nn
