// DeepLabV3 with a dilated ResNet-50 trunk, as torchvision.models.segmentation builds it
// (deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=K, aux_loss)), under its
// parameter names (see models.h). Both heads' logits are resized to the input by bilinear
// interpolation (align_corners=False), as torchvision's _SimpleSegmentationModel does.
#include <cmath>

#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {

// Appends conv (k x k, no bias, padding = dilation), BatchNorm2d and ReLU to seq as its next
// children, as torchvision's heads are built.
ConvBnRelu add_conv_bn_relu(Sequential& seq, int64_t in, int64_t out, int64_t k, int64_t dilation) {
  ConvBnRelu u;
  u.conv = std::make_shared<Conv2d>(in, out, k, 1, k == 1 ? 0 : dilation, false, dilation);
  u.bn = std::make_shared<BatchNorm2d>(out);
  seq.add(u.conv);
  seq.add(u.bn);
  seq.add(std::make_shared<ReLU>());
  return u;
}

}  // namespace

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, int64_t dilation) {
  const int64_t out = planes * kExpansion;
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 1, 1, 0, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module(
      "conv2", std::make_shared<Conv2d>(planes, planes, 3, stride, dilation, false, dilation));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", std::make_shared<Conv2d>(planes, out, 1, 1, 0, false));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out));
  if (stride != 1 || in_planes != out) {
    downsample = register_module("downsample", std::make_shared<Sequential>());
    downsample->add(std::make_shared<Conv2d>(in_planes, out, 1, stride, 0, false));
    downsample->add(std::make_shared<BatchNorm2d>(out));
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = bn1->forward_act(conv1->forward(x), Tensor(), true);
  h = bn2->forward_act(conv2->forward(h), Tensor(), true);
  Tensor identity = downsample ? downsample->forward(x) : x;
  return bn3->forward_act(conv3->forward(h), identity, true);
}

DilatedResNetTrunk::DilatedResNetTrunk(const std::vector<int64_t>& blocks,
                                       const std::vector<bool>& dilate) {
  HPCNET_REQUIRE(blocks.size() == 4 && dilate.size() == 3,
                 "DilatedResNetTrunk: four stages and three dilation flags");
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 64, 7, 2, 3, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t in_planes = 64, dilation = 1, stride_so_far = 4;
  for (size_t s = 0; s < 4; ++s) {
    // torchvision's _make_layer: a dilated stage trades its stride for dilation; its first block
    // keeps the previous dilation, the others take the new one.
    int64_t stride = s == 0 ? 1 : 2;
    const int64_t previous = dilation;
    if (s > 0 && dilate[s - 1]) {
      dilation *= stride;
      stride = 1;
    }
    stride_so_far *= stride;
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks[s]; ++b) {
      layer->add(std::make_shared<Bottleneck>(in_planes, widths[s], b == 0 ? stride : 1,
                                              b == 0 ? previous : dilation));
      in_planes = widths[s] * Bottleneck::kExpansion;
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
    strides_.push_back(stride_so_far);
  }
  for (auto& [name, p] : named_parameters())
    if (p.dim() == 4) kaiming_normal_fan_out(p);
}

Outputs DilatedResNetTrunk::forward_features(const Tensor& input) {
  return torchvision_resnet_features(*conv1, *bn1, *maxpool, layers, input);
}

std::vector<int64_t> DilatedResNetTrunk::feature_strides() const {
  std::vector<int64_t> s{2};
  s.insert(s.end(), strides_.begin(), strides_.end());
  return s;
}

DeepLabV3::DeepLabV3(int64_t num_classes, bool aux_loss) {
  HPCNET_REQUIRE(num_classes >= 1, "deeplabv3: number of classes must be positive");
  backbone = register_module(
      "backbone", std::make_shared<DilatedResNetTrunk>(std::vector<int64_t>{3, 4, 6, 3},
                                                       std::vector<bool>{false, true, true}));
  const int64_t in = 2048, mid = 256;
  // classifier = DeepLabHead: Sequential(ASPP, conv 3x3, BN, ReLU, conv 1x1 -> K).
  auto classifier = register_module("classifier", std::make_shared<Sequential>());
  auto aspp = std::make_shared<ModuleDict>();
  classifier->add(aspp);
  auto convs = aspp->add("convs", std::make_shared<ModuleDict>());
  {
    auto b0 = convs->add("0", std::make_shared<Sequential>());
    branches.push_back(add_conv_bn_relu(*b0, in, mid, 1, 1));
    for (int64_t i = 0; i < 3; ++i) {  // ASPPConv: 3x3 at rates 12, 24, 36
      auto b = convs->add(std::to_string(i + 1), std::make_shared<Sequential>());
      branches.push_back(add_conv_bn_relu(*b, in, mid, 3, kAsppRates[i]));
    }
    // ASPPPooling: Sequential(AdaptiveAvgPool2d(1), conv 1x1, BN, ReLU), then upsampled.
    auto pool = convs->add("4", std::make_shared<Sequential>());
    pool->add(std::make_shared<GlobalAvgPool2d>());
    branches.push_back(add_conv_bn_relu(*pool, in, mid, 1, 1));
  }
  auto project = aspp->add("project", std::make_shared<Sequential>());
  project_unit = add_conv_bn_relu(*project, 5 * mid, mid, 1, 1);
  project_dropout = std::make_shared<Dropout>(0.5);
  project->add(project_dropout);
  head_unit = add_conv_bn_relu(*classifier, mid, mid, 3, 1);
  head_out = std::make_shared<Conv2d>(mid, num_classes, 1, 1, 0, true);
  classifier->add(head_out);
  if (aux_loss) {
    // aux_classifier = FCNHead(1024, K): conv 3x3 -> 256, BN, ReLU, Dropout(0.1), conv 1x1 -> K.
    auto aux = register_module("aux_classifier", std::make_shared<Sequential>());
    aux_unit = add_conv_bn_relu(*aux, 1024, 256, 3, 1);
    aux_dropout = std::make_shared<Dropout>(0.1);
    aux->add(aux_dropout);
    aux_out = std::make_shared<Conv2d>(256, num_classes, 1, 1, 0, true);
    aux->add(aux_out);
  }
}

Tensor DeepLabV3::head(const Tensor& features) {
  const int64_t h = features.size(2), w = features.size(3);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < 4; ++i) parts.push_back(branches[i].forward(features));
  // The pooling branch: (N, 2048) -> (N, 2048, 1, 1) -> conv/BN/ReLU -> bilinear to (h, w).
  Tensor pooled = F::global_avg_pool2d(features);
  pooled = F::reshape(pooled, {pooled.size(0), pooled.size(1), 1, 1});
  parts.push_back(F::upsample_bilinear2d(branches[4].forward(pooled), h, w, false));
  Tensor x = project_dropout->forward(project_unit.forward(F::cat(parts, 1)));
  return head_out->forward(head_unit.forward(x));
}

Outputs DeepLabV3::run(const Tensor& input, bool with_aux) {
  Outputs feats = backbone->forward_features(input);  // stem, layer1..layer4
  const int64_t H = input.size(2), W = input.size(3);
  Outputs out{F::upsample_bilinear2d(head(feats[4]), H, W, false)};
  if (with_aux && aux_out) {
    Tensor a = aux_out->forward(aux_dropout->forward(aux_unit.forward(feats[3])));
    out.push_back(F::upsample_bilinear2d(a, H, W, false));
  }
  return out;
}

Outputs DeepLabV3::forward_all(const Tensor& input) { return run(input, true); }
Tensor DeepLabV3::forward(const Tensor& input) { return run(input, false)[0]; }

}  // namespace hpcnet::nn
