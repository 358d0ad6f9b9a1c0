// U-Net with an ImageNet ResNet encoder, as segmentation_models_pytorch builds it (see models.h),
// and that encoder, torchvision's ResNet trunk.
#include <cmath>

#include "hpcnet/rng.h"
#include "src/nn/models/models.h"

namespace hpcnet::nn {
namespace {

int64_t fan(const Tensor& w, bool out) {
  const int64_t receptive = w.numel() / (w.size(0) * w.size(1));
  return (out ? w.size(0) : w.size(1)) * receptive;
}

void uniform(Tensor& w, double bound) {
  float* p = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i)
    p[i] = static_cast<float>((2 * default_rng().uniform() - 1) * bound);
}

void zero(Tensor& t) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.f;
}

}  // namespace

void kaiming_normal_fan_out(Tensor& w) {
  const double std = std::sqrt(2.0 / static_cast<double>(fan(w, true)));
  float* p = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = static_cast<float>(default_rng().normal() * std);
}

Outputs torchvision_resnet_features(Conv2d& conv1, BatchNorm2d& bn1, MaxPool2d& maxpool,
                                    const std::vector<std::shared_ptr<Sequential>>& layers,
                                    const Tensor& input) {
  HPCNET_REQUIRE(input.dim() == 4 && input.size(1) == 3,
                 "resnet trunk takes (N, 3, H, W) images, got " + shape_str(input.shape()));
  Outputs out;
  Tensor x = bn1.forward_act(conv1.forward(input), Tensor(), true);  // (N, 64, H/2, W/2)
  out.push_back(x);
  x = maxpool.forward(x);
  for (auto& layer : layers) {
    x = layer->forward(x);
    out.push_back(x);
  }
  return out;
}

ImageNetResNetTrunk::ImageNetResNetTrunk(const std::vector<int64_t>& blocks) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 64, 7, 2, 3, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t in_planes = 64;
  for (size_t s = 0; s < 4; ++s) {
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks.at(s); ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      layer->add(std::make_shared<BasicBlock>(in_planes, widths[s], stride, true, "downsample"));
      in_planes = widths[s];
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
  }
  for (auto& [name, p] : named_parameters())
    if (p.dim() == 4) kaiming_normal_fan_out(p);
}

Outputs ImageNetResNetTrunk::forward_features(const Tensor& input) {
  return torchvision_resnet_features(*conv1, *bn1, *maxpool, layers, input);
}

Unet::Unet(const std::vector<int64_t>& encoder_blocks, int64_t num_classes, bool bottleneck) {
  if (bottleneck)
    encoder =
        register_module("encoder", std::make_shared<DilatedResNetTrunk>(
                                       encoder_blocks, std::vector<bool>{false, false, false}));
  else
    encoder = register_module("encoder", std::make_shared<ImageNetResNetTrunk>(encoder_blocks));
  // Decoder block i: in (previous output; block 0: the encoder's last map) + skip (the encoder
  // map of the next finer stride, none for the last block) -> out, as smp's UnetDecoder.
  const std::vector<int64_t> ch = encoder->feature_channels();  // strides 2, 4, 8, 16, 32
  const int64_t out[5] = {256, 128, 64, 32, 16};
  int64_t in[5], skip[5];
  for (int i = 0; i < 5; ++i) {
    in[i] = i == 0 ? ch[4] : out[i - 1];
    skip[i] = i < 4 ? ch[static_cast<size_t>(3 - i)] : 0;
  }
  auto decoder = register_module("decoder", std::make_shared<ModuleDict>());
  auto list = decoder->add("blocks", std::make_shared<ModuleDict>());
  for (int i = 0; i < 5; ++i) {
    auto block = list->add(std::to_string(i), std::make_shared<ModuleDict>());
    DecoderBlock d;
    for (int k = 0; k < 2; ++k) {  // conv{1,2} = Sequential(conv 3x3, BatchNorm2d[, ReLU])
      const int64_t cin = k == 0 ? in[i] + skip[i] : out[i];
      auto conv = std::make_shared<Conv2d>(cin, out[i], 3, 1, 1, false);
      auto bn = std::make_shared<BatchNorm2d>(out[i]);
      auto seq = block->add(k == 0 ? "conv1" : "conv2", std::make_shared<Sequential>());
      seq->add(conv);
      seq->add(bn);
      (k == 0 ? d.conv1 : d.conv2) = conv;
      (k == 0 ? d.bn1 : d.bn2) = bn;
    }
    blocks.push_back(d);
  }
  auto head_seq = register_module("segmentation_head", std::make_shared<Sequential>());
  head = std::make_shared<Conv2d>(16, num_classes, 3, 1, 1, true);
  head_seq->add(head);
  // smp's initialize_decoder (kaiming_uniform fan_in relu; BatchNorm 1, 0) and initialize_head
  // (xavier_uniform, bias 0).
  for (auto& d : blocks)
    for (Conv2d* c : {d.conv1.get(), d.conv2.get()})
      uniform(c->weight, std::sqrt(6.0 / static_cast<double>(fan(c->weight, false))));
  uniform(head->weight, std::sqrt(6.0 / static_cast<double>(fan(head->weight, false) +
                                                            fan(head->weight, true))));
  zero(head->bias);
}

Tensor Unet::forward(const Tensor& x) {
  HPCNET_REQUIRE(x.dim() == 4 && x.size(2) % 32 == 0 && x.size(3) % 32 == 0,
                 "unet takes (N, 3, H, W) images with H and W multiples of 32, got " +
                     shape_str(x.shape()));
  Outputs f = encoder->forward_features(x);  // strides 2, 4, 8, 16, 32
  Tensor y = f[4];
  for (int i = 0; i < 5; ++i) {
    y = F::upsample_nearest2d(y, 2);
    if (i < 4) y = F::cat({y, f[3 - i]}, 1);
    const DecoderBlock& d = blocks[static_cast<size_t>(i)];
    y = d.bn1->forward_act(d.conv1->forward(y), Tensor(), true);
    y = d.bn2->forward_act(d.conv2->forward(y), Tensor(), true);
  }
  return head->forward(y);
}

}  // namespace hpcnet::nn
