// The built-in models. Each is a Module whose parameter names match its PyTorch definition.
#pragma once

#include "hpcnet/nn.h"

namespace hpcnet::nn {

class LeNet : public Module {
 public:
  explicit LeNet(int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<MaxPool2d> pool;
  std::shared_ptr<Linear> fc1, fc2, fc3;
};

// A ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), 3x3 convolutions
// without bias. The shortcut is the identity, or where the shape changes either option A
// (subsample and zero-pad channels, no parameters: the CIFAR ResNets) or option B (1x1 conv +
// BatchNorm as children "shortcut.0" / "shortcut.1": resnet18).
class BasicBlock : public Module {
 public:
  // shortcut_name: the projection's child name, "shortcut" (the CIFAR ResNets) or "downsample"
  // (torchvision's ImageNet ResNets).
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, bool projection_shortcut,
             const std::string& shortcut_name = "shortcut");
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> shortcut;  // option B only
  int64_t stride, pad_channels = 0;      // option A when pad_channels > 0 or stride > 1
};

// The CIFAR ResNets' trunk: conv1 3x3 (3 -> widths[0]), bn1, relu, then stages layer1.. of
// basic blocks, the first block of every stage after the first at stride 2. forward_features
// returns each stage's output: strides 1, 2, 4, ... of the input, widths[k] channels.
class ResNetTrunk : public Trunk {
 public:
  ResNetTrunk(const std::vector<int64_t>& widths, int64_t blocks_per_stage, bool projection);
  Outputs forward_features(const Tensor& x) override;
  Tensor forward(const Tensor& x) override;  // the last stage only (no copies of the others)
  std::vector<int64_t> feature_strides() const override;
  std::vector<int64_t> feature_channels() const override { return widths; }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::vector<std::shared_ptr<Sequential>> layers;
  std::vector<int64_t> widths;
};

// CIFAR ResNets: the trunk (inlined: its parameters keep PyTorch's names conv1.*, layer1.*, ...)
// and the classifier head, global average pool then linear. resnet20/32/56: widths 16/32/64,
// 3/5/9 blocks per stage, option A, Kaiming-normal conv and linear weights (He et al. 2016).
// resnet18: widths 64..512, 2 blocks per stage, option B, PyTorch's default initialisation.
class CifarResNet : public Module {
 public:
  CifarResNet(const std::vector<int64_t>& widths, int64_t blocks_per_stage, bool projection,
              bool kaiming_init, int64_t num_classes);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<ResNetTrunk> trunk;
  std::shared_ptr<Linear> linear;
};

// torchvision's ImageNet ResNet trunk (resnet18: 2, 2, 2, 2 basic blocks; resnet34: 3, 4, 6, 3),
// as segmentation_models_pytorch's encoder: conv1 7x7 stride 2 (3 -> 64), bn1, relu, maxpool 3x3
// stride 2, layer1..layer4 (64, 128, 256, 512 channels, the first block of layers 2-4 at stride
// 2 with a 1x1 "downsample" projection). forward_features returns the stem (stride 2) and each
// layer (strides 4, 8, 16, 32). Convolutions are initialised kaiming_normal(fan_out, relu) as
// torchvision does.
class ImageNetResNetTrunk : public Trunk {
 public:
  explicit ImageNetResNetTrunk(const std::vector<int64_t>& blocks_per_stage);
  Outputs forward_features(const Tensor& x) override;
  std::vector<int64_t> feature_strides() const override { return {2, 4, 8, 16, 32}; }
  std::vector<int64_t> feature_channels() const override { return {64, 64, 128, 256, 512}; }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;
  std::vector<std::shared_ptr<Sequential>> layers;
};

// segmentation_models_pytorch's Unet(encoder, encoder_weights=None, classes=K) under its names:
// encoder.* (the trunk above), decoder.blocks.{0..4}.conv{1,2}.{0,1} (conv 3x3 without bias +
// BatchNorm + ReLU; each block upsamples 2x nearest and concatenates the encoder's feature map of
// that stride; decoder channels 256, 128, 64, 32, 16), segmentation_head.0 (conv 3x3 -> K with
// bias). Input sides must be multiples of 32. forward returns logits (N, K, H, W).
class Unet : public Module {
 public:
  Unet(const std::vector<int64_t>& encoder_blocks, int64_t num_classes);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<ImageNetResNetTrunk> encoder;
  struct DecoderBlock {
    std::shared_ptr<Conv2d> conv1, conv2;
    std::shared_ptr<BatchNorm2d> bn1, bn2;
  };
  std::vector<DecoderBlock> blocks;
  std::shared_ptr<Conv2d> head;
};

}  // namespace hpcnet::nn
