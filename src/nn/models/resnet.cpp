// The CIFAR ResNets and torchvision's ImageNet ResNets (see models.h). Each block's tail,
// relu(bn2(conv2(.)) + shortcut), runs as one fused batch-norm kernel, as does each
// relu(bn(conv(.))).
#include <cmath>

#include "hpcnet/rng.h"
#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {
// torch.nn.init.kaiming_normal_(w) (fan_in, gain sqrt(2)): normal with std sqrt(2 / fan_in).
void kaiming_normal(Tensor& w) {
  int64_t fan_in = w.numel() / w.size(0);
  double std = std::sqrt(2.0 / static_cast<double>(fan_in));
  float* p = w.data<float>();
  Rng& rng = default_rng();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = static_cast<float>(rng.normal() * std);
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride_, bool projection,
                       const std::string& shortcut_name)
    : stride(stride_) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 3, stride_, 1, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(planes, planes, 3, 1, 1, false));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (stride_ != 1 || in_planes != planes) {
    if (projection) {
      shortcut = register_module(shortcut_name, std::make_shared<Sequential>());
      shortcut->add(std::make_shared<Conv2d>(in_planes, planes, 1, stride_, 0, false));
      shortcut->add(std::make_shared<BatchNorm2d>(planes));
    } else {
      HPCNET_REQUIRE(planes - in_planes == 2 * (planes / 4),
                     "option-A shortcut pads planes / 4 channels on each side");
      pad_channels = planes / 4;
    }
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1->forward_act(conv1->forward(x), Tensor(), true);
  Tensor sc = x;
  if (shortcut)
    sc = shortcut->forward(x);
  else if (stride != 1 || pad_channels > 0)
    sc = F::subsample_pad(x, stride, pad_channels);
  return bn2->forward_act(conv2->forward(out), sc, true);
}

ResNetTrunk::ResNetTrunk(const std::vector<int64_t>& widths_, int64_t blocks, bool projection)
    : widths(widths_) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, widths[0], 3, 1, 1, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(widths[0]));
  int64_t in_planes = widths[0];
  for (size_t s = 0; s < widths.size(); ++s) {
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      layer->add(std::make_shared<BasicBlock>(in_planes, widths[s], stride, projection));
      in_planes = widths[s];
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
  }
}

std::vector<int64_t> ResNetTrunk::feature_strides() const {
  std::vector<int64_t> s;
  for (size_t k = 0; k < layers.size(); ++k) s.push_back(int64_t{1} << k);
  return s;
}

Outputs ResNetTrunk::forward_features(const Tensor& input) {
  HPCNET_REQUIRE(input.dim() == 4 && input.size(1) == 3,
                 "resnet takes (N, 3, H, W) images, got " + shape_str(input.shape()));
  Outputs out;
  Tensor x = bn1->forward_act(conv1->forward(input), Tensor(), true);
  for (auto& layer : layers) {
    x = layer->forward(x);
    out.push_back(x);
  }
  return out;
}

Tensor ResNetTrunk::forward(const Tensor& input) {
  HPCNET_REQUIRE(input.dim() == 4 && input.size(1) == 3,
                 "resnet takes (N, 3, H, W) images, got " + shape_str(input.shape()));
  Tensor x = bn1->forward_act(conv1->forward(input), Tensor(), true);
  for (auto& layer : layers) x = layer->forward(x);
  return x;
}

CifarResNet::CifarResNet(const std::vector<int64_t>& widths, int64_t blocks, bool projection,
                         bool kaiming_init, int64_t num_classes) {
  trunk = register_module("", std::make_shared<ResNetTrunk>(widths, blocks, projection));
  linear = register_module("linear", std::make_shared<Linear>(widths.back(), num_classes));
  if (kaiming_init) {
    // As in the reference CIFAR ResNet code: every conv and linear weight, after construction.
    for (auto& [name, p] : named_parameters())
      if (p.dim() >= 2) kaiming_normal(p);
  }
}

Tensor CifarResNet::forward(const Tensor& input) {
  return linear->forward(F::global_avg_pool2d(trunk->forward(input)));
}

}  // namespace hpcnet::nn

namespace hpcnet::nn {

TorchvisionResNet::TorchvisionResNet(const std::vector<int64_t>& blocks, bool bottleneck,
                                     int64_t num_classes, bool zero_init_residual) {
  HPCNET_REQUIRE(blocks.size() == 4, "TorchvisionResNet: four stages");
  if (bottleneck)
    trunk = register_module(
        "", std::make_shared<DilatedResNetTrunk>(blocks, std::vector<bool>{false, false, false}));
  else
    trunk = register_module("", std::make_shared<ImageNetResNetTrunk>(blocks));
  const int64_t features = bottleneck ? 512 * Bottleneck::kExpansion : 512;
  fc = register_module("fc", std::make_shared<Linear>(features, num_classes));
  if (zero_init_residual) {
    // torchvision: nn.init.constant_(m.bn3.weight, 0) / (m.bn2.weight, 0) in every block.
    for (auto& [name, p] : named_parameters()) {
      const std::string tail = bottleneck ? ".bn3.weight" : ".bn2.weight";
      if (name.rfind("layer", 0) == 0 && name.size() > tail.size() &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
        float* w = p.data<float>();
        for (int64_t i = 0; i < p.numel(); ++i) w[i] = 0.f;
      }
    }
  }
}

Tensor TorchvisionResNet::forward(const Tensor& input) {
  return fc->forward(F::global_avg_pool2d(trunk->forward(input)));
}

}  // namespace hpcnet::nn
