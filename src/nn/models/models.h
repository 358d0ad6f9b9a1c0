// The built-in models. Each is a Module whose parameter names match its PyTorch definition.
#pragma once

#include "hpcnet/nn.h"
#include "src/nn/models/yolo.h"

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
// BatchNorm as children "shortcut.0" / "shortcut.1": cifar_resnet18).
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
// cifar_resnet18 (called resnet18 before torchvision's ResNets came): widths 64..512, 2 blocks per
// stage, option B, PyTorch's default initialisation.
class CifarResNet : public Module {
 public:
  CifarResNet(const std::vector<int64_t>& widths, int64_t blocks_per_stage, bool projection,
              bool kaiming_init, int64_t num_classes);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<ResNetTrunk> trunk;
  std::shared_ptr<Linear> linear;
};

// torch.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): torchvision's ResNet
// initialisation of every convolution (float32 w, from default_rng()).
void kaiming_normal_fan_out(Tensor& w);
// A torchvision ResNet's forward as a trunk: relu(bn1(conv1(x))) (stride 2), maxpool, then each
// layer; returns the stem's map and every layer's.
Outputs torchvision_resnet_features(Conv2d& conv1, BatchNorm2d& bn1, MaxPool2d& maxpool,
                                    const std::vector<std::shared_ptr<Sequential>>& layers,
                                    const Tensor& input);

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

// torchvision's ResNet Bottleneck (v1.5: the stride on the 3x3): conv1 1x1 -> planes, conv2 3x3
// (stride, dilation, padding = dilation), conv3 1x1 -> 4 planes, each with its BatchNorm, plus
// the "downsample" projection (1x1 conv at the stride + BatchNorm) where the shape changes.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, int64_t dilation);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
};

// torchvision's resnet50 trunk (3, 4, 6, 3 bottlenecks; 256, 512, 1024, 2048 channels) with
// replace_stride_with_dilation = dilate for layers 2-4: a dilated layer keeps the resolution and
// doubles the dilation instead (DeepLabV3: {false, true, true}, output stride 8). Names conv1,
// bn1, layer1..layer4 as torchvision's; convolutions kaiming_normal(fan_out, relu).
// forward_features returns the stem (stride 2) and each layer.
class DilatedResNetTrunk : public Trunk {
 public:
  DilatedResNetTrunk(const std::vector<int64_t>& blocks, const std::vector<bool>& dilate);
  Outputs forward_features(const Tensor& x) override;
  std::vector<int64_t> feature_strides() const override;
  std::vector<int64_t> feature_channels() const override { return {64, 256, 512, 1024, 2048}; }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;
  std::vector<std::shared_ptr<Sequential>> layers;

 private:
  std::vector<int64_t> strides_;  // of layer1..layer4
};

// torchvision.models.resnet18/34/50/101(num_classes=K, zero_init_residual): conv1 7x7 stride 2
// (3 -> 64), bn1, relu, maxpool 3x3 stride 2, layer1..layer4 (BasicBlock 64..512 for 18 and 34;
// Bottleneck v1.5, the stride on the 3x3, 256..2048 for 50 and 101; the first block of layers 2-4
// at stride 2 with a 1x1 conv + BatchNorm "downsample"), global average pool, fc (Linear). Names
// and shapes as torchvision's state_dict. Initialisation as torchvision's: convolutions
// kaiming_normal(fan_out, relu), BatchNorm weight 1 bias 0, fc PyTorch's Linear default; with
// zero_init_residual the last BatchNorm of every block (bn2 / bn3) starts at weight 0. The trunk
// is the ImageNetResNetTrunk (basic) or the DilatedResNetTrunk without dilation (bottleneck),
// inlined so that its names are torchvision's.
class TorchvisionResNet : public Module {
 public:
  TorchvisionResNet(const std::vector<int64_t>& blocks, bool bottleneck, int64_t num_classes,
                    bool zero_init_residual);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Trunk> trunk;
  std::shared_ptr<Linear> fc;
};

// A conv (no bias) + BatchNorm2d + ReLU unit of torchvision's heads, run as one fused BN+ReLU.
struct ConvBnRelu {
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  Tensor forward(const Tensor& x) const {
    return bn->forward_act(conv->forward(x), Tensor(), true);
  }
};

// torchvision's deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=K,
// aux_loss): backbone.* (the dilated trunk above, output stride 8); classifier.0 = ASPP
// (convs.0 1x1, convs.1-3 3x3 at dilation 12, 24, 36, convs.4 image pooling: global average, 1x1,
// bilinear back; each conv + BN + ReLU to 256; project.0/.1 1x1 1280 -> 256 + BN + ReLU +
// Dropout(0.5)), classifier.1/.2 3x3 + BN + ReLU, classifier.4 1x1 -> K with bias; with aux_loss
// aux_classifier (FCNHead on layer3: .0/.1 3x3 1024 -> 256 + BN + ReLU, Dropout(0.1), .4 1x1 -> K).
// Both logits are resized to the input (bilinear, align_corners=False). forward_all returns
// {out, aux} (aux only with aux_loss); forward returns out and skips the aux head.
class DeepLabV3 : public Module {
 public:
  static constexpr int64_t kAsppRates[3] = {12, 24, 36};
  DeepLabV3(int64_t num_classes, bool aux_loss);
  Tensor forward(const Tensor& x) override;
  Outputs forward_all(const Tensor& x) override;
  std::shared_ptr<DilatedResNetTrunk> backbone;

 private:
  Outputs run(const Tensor& x, bool with_aux);
  Tensor head(const Tensor& features);  // the classifier at the features' resolution
  std::vector<ConvBnRelu> branches;     // ASPP convs.0..4 (4: after the pooling)
  ConvBnRelu project_unit, head_unit, aux_unit;
  std::shared_ptr<Dropout> project_dropout, aux_dropout;
  std::shared_ptr<Conv2d> head_out, aux_out;
};


// YOLO models (YOLOv8, YOLO11 and model YAMLs): src/nn/models/yolo.h.

}  // namespace hpcnet::nn
