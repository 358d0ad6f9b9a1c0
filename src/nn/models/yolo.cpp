// YOLOv8 detection models as Ultralytics builds them from yolov8.yaml (DetectionModel, 8.4):
// the layer list model.0 .. model.22 with Ultralytics' parameter names and shapes, so a
// state_dict converts both ways by name. Conv = conv (no bias) + BatchNorm (eps 1e-3, momentum
// 0.03) + SiLU; C2f; SPPF; nearest 2x
// upsample and concat; the legacy (v8) Detect head with reg_max 16 at strides 8, 16, 32.
// forward_all returns the head's raw outputs {boxes (B, 64, A), scores (B, nc, A)} (A anchors of
// the three levels, row-major per level, stride 8 first), as Ultralytics' training dict.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "src/nn/models/models.h"
#include "src/ops/conv2d/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/ops.h"
#include "src/ops/trace.h"

namespace hpcnet::nn {
namespace {

// HPCNET_FUSE=0 turns the inference folding off (to measure it, or to rule it out).
std::atomic<bool>& fuse_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("HPCNET_FUSE");
    return !(e && std::string(e) == "0");
  }()};
  return on;
}
bool fuse_enabled() { return fuse_flag().load(std::memory_order_relaxed); }

// Ultralytics' make_divisible(x, 8): the next multiple of 8 at or above x.
int64_t make_divisible(double x) { return static_cast<int64_t>(std::ceil(x / 8.0)) * 8; }

}  // namespace

void set_inference_fusion(bool on) { fuse_flag().store(on); }

namespace {
std::atomic<bool> g_concat_in_place{true};
}  // namespace
void set_concat_in_place(bool on) { g_concat_in_place.store(on); }

YoloConv::YoloConv(int64_t c1, int64_t c2, int64_t k, int64_t s, bool act) : act(act) {
  conv = register_module("conv", std::make_shared<Conv2d>(c1, c2, k, s, k / 2, false));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(c2, 1e-3, 0.03));
}

bool YoloConv::folds() const {
  return !is_training() && !grad_mode_enabled() && fuse_enabled() &&
         conv->weight.device().is_cpu() && conv->weight.dtype() == DType::kFloat32 &&
         trace::g_recorder == nullptr;
}

Tensor YoloConv::forward(const Tensor& x) {
  // Inference (eval mode, no graph, CPU, not tracing for export): Ultralytics' fuse(), BatchNorm
  // folded into the convolution and SiLU fused after it, two passes over the output fewer.
  if (folds()) {
    // SiLU runs as the convolution's post-op (HPCNET_FUSE=0 turns both off).
    const auto [w, b] = folded_weights();
    return act ? F::conv2d_silu(x, w, b, conv->stride, conv->padding, conv->dilation)
               : F::conv2d(x, w, b, conv->stride, conv->padding, conv->dilation);
  }
  Tensor y = bn->forward(conv->forward(x));
  return act ? F::silu(y) : y;
}

namespace {
ops::Conv2dParams conv_params(const Conv2d& c) {
  return {c.stride, c.stride, c.padding, c.padding, c.dilation, c.dilation};
}
}  // namespace

void YoloConv::forward_into(const Tensor& x, Tensor& out) {
  HPCNET_CHECK(folds(), "YoloConv::forward_into: only for folded inference");
  const auto [w, b] = folded_weights();
  ops::conv2d_into(x.is_dense() ? x : x.contiguous(), w, b, conv_params(*conv),
                   act ? ops::Act::kSilu : ops::Act::kNone, out);
}

std::pair<Tensor, Tensor> YoloConv::folded_weights() const {
  // w' = w g / sqrt(v + eps) per output channel, b' = beta - m g / sqrt(v + eps), in double.
  const Tensor w = conv->weight.contiguous();
  const int64_t k = w.size(0), per = w.numel() / k;
  Tensor fw = Tensor::empty(w.shape()), fb = Tensor::empty({k});
  const float *src = w.data<float>(), *g = bn->weight.contiguous().data<float>(),
              *beta = bn->bias.contiguous().data<float>(),
              *mean = bn->running_mean.contiguous().data<float>(),
              *var = bn->running_var.contiguous().data<float>();
  float *dst = fw.data<float>(), *bias = fb.data<float>();
  for (int64_t o = 0; o < k; ++o) {
    const double scale = g[o] / std::sqrt(static_cast<double>(var[o]) + bn->eps);
    for (int64_t i = 0; i < per; ++i)
      dst[o * per + i] = static_cast<float>(src[o * per + i] * scale);
    bias[o] = static_cast<float>(beta[o] - mean[o] * scale);
  }
  return {fw, fb};
}

YoloBottleneck::YoloBottleneck(int64_t c, bool shortcut) : add(shortcut) {
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c, c, 3));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(c, c, 3));
}

Tensor YoloBottleneck::forward(const Tensor& x) {
  Tensor y = cv2->forward(cv1->forward(x));
  return add ? F::add(x, y) : y;
}

void YoloBottleneck::forward_into(const Tensor& x, Tensor& out) {
  if (!add) return cv2->forward_into(cv1->forward(x), out);
  const Tensor y = cv2->forward(cv1->forward(x));
  ops::add(x, ops::as_layout(y, out), out);  // x: a slice of out's buffer, in its layout
}

C2f::C2f(int64_t c1, int64_t c2, int64_t n, bool shortcut) : c(c2 / 2) {
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, 2 * c, 1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>((2 + n) * c, c2, 1));
  auto list = register_module("m", std::make_shared<ModuleDict>());
  for (int64_t i = 0; i < n; ++i)
    m.push_back(list->add(std::to_string(i), std::make_shared<YoloBottleneck>(c, shortcut)));
}

namespace {
// Whether the predict path writes concatenations in place: one image, folded convolutions (see
// C2f::concat_in_place), not turned off by set_concat_in_place.
bool in_place(const Tensor& x, const YoloConv& conv) {
  return x.dim() == 4 && x.size(0) == 1 && conv.folds() &&
         g_concat_in_place.load(std::memory_order_relaxed);
}

// A buffer (1, sum of pieces, h, w) whose pieces are written in place: in `layout` when every
// piece is whole 16-channel blocks, else row-major (a partial block is not a run of memory).
Tensor concat_buffer(Layout layout, const std::vector<int64_t>& pieces, int64_t h, int64_t w,
                     const Tensor& like) {
  int64_t channels = 0;
  for (int64_t c : pieces) {
    channels += c;
    if (c % 16 != 0) layout = Layout::kStrided;
  }
  return Tensor::empty_layout({1, channels, h, w}, like.dtype(), like.device(), layout);
}

// Channels [start, start + length) of a buffer of one image: a view (narrow of one run).
Tensor channel_slice(const Tensor& buf, int64_t start, int64_t length) {
  Tensor v = F::narrow(buf, 1, start, length);
  HPCNET_CHECK(v.impl()->storage == buf.impl()->storage, "yolov8: a slice of a buffer is not a view");
  return v;
}

int64_t out_channels(const YoloConv& c) { return c.conv->weight.size(0); }
}  // namespace

Tensor C2f::concat_in_place(const Tensor& x) {
  // Predict time, one image: the concatenation without a copy. Its (2 + n) c channels are
  // allocated first and every piece is written in its place: cv1's two halves at the start,
  // each bottleneck's output after them (channel slices of one image are runs of memory, in
  // NCHW and, in whole 16-channel blocks, in the blocked layout). The buffer is the cat.
  const int64_t n = static_cast<int64_t>(m.size());
  Tensor cat = concat_buffer(
      ops::conv2d_output_layout(x, cv1->conv->weight.shape(), conv_params(*cv1->conv)),
      std::vector<int64_t>(static_cast<size_t>(2 + n), c), x.size(2), x.size(3), x);
  Tensor first = channel_slice(cat, 0, 2 * c);
  cv1->forward_into(x, first);
  Tensor h = channel_slice(cat, c, c);
  for (int64_t i = 0; i < n; ++i) {
    Tensor piece = channel_slice(cat, (2 + i) * c, c);
    m[i]->forward_into(h, piece);
    h = piece;
  }
  return cat;
}

Tensor C2f::forward(const Tensor& x) {
  // Ultralytics chunks cv1's output (B, 2c, H, W) in two and concatenates both halves with the
  // bottlenecks' outputs. The two halves side by side are that output itself, so it goes into
  // the concatenation whole; only the second half, the first bottleneck's input, is sliced out.
  if (in_place(x, *cv1)) return cv2->forward(concat_in_place(x));
  Tensor y = cv1->forward(x);
  std::vector<Tensor> ys = {y};
  Tensor h = F::narrow(y, 1, c, c);
  for (auto& b : m) ys.push_back(h = b->forward(h));
  return cv2->forward(F::cat(ys, 1));
}

void C2f::forward_into(const Tensor& x, Tensor& out) {
  HPCNET_CHECK(in_place(x, *cv1), "C2f::forward_into: only at predict time");
  cv2->forward_into(concat_in_place(x), out);
}

Sppf::Sppf(int64_t c1, int64_t c2, int64_t k) {
  const int64_t h = c1 / 2;
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, h, 1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(h * 4, c2, 1));
  pool = register_module("m", std::make_shared<MaxPool2d>(k, 1, k / 2));
}

Tensor Sppf::pyramid(const Tensor& x) {
  std::vector<Tensor> ys = {cv1->forward(x)};
  for (int i = 0; i < 3; ++i) ys.push_back(pool->forward(ys.back()));
  return F::cat(ys, 1);
}

Tensor Sppf::forward(const Tensor& x) { return cv2->forward(pyramid(x)); }

void Sppf::forward_into(const Tensor& x, Tensor& out) { cv2->forward_into(pyramid(x), out); }

YoloDetect::YoloDetect(int64_t nc, const std::vector<int64_t>& ch) : nc(nc) {
  const int64_t c2 = std::max<int64_t>({16, ch[0] / 4, 4 * kRegMax});
  const int64_t c3 = std::max<int64_t>(ch[0], std::min<int64_t>(nc, 100));
  auto l2 = register_module("cv2", std::make_shared<ModuleDict>());
  auto l3 = register_module("cv3", std::make_shared<ModuleDict>());
  for (size_t i = 0; i < ch.size(); ++i) {
    Branch b;
    auto s2 = l2->add(std::to_string(i), std::make_shared<Sequential>());
    b.box1 = std::make_shared<YoloConv>(ch[i], c2, 3);
    b.box2 = std::make_shared<YoloConv>(c2, c2, 3);
    b.box_out = std::make_shared<Conv2d>(c2, 4 * kRegMax, 1);
    s2->add(b.box1);
    s2->add(b.box2);
    s2->add(b.box_out);
    auto s3 = l3->add(std::to_string(i), std::make_shared<Sequential>());
    b.cls1 = std::make_shared<YoloConv>(ch[i], c3, 3);
    b.cls2 = std::make_shared<YoloConv>(c3, c3, 3);
    b.cls_out = std::make_shared<Conv2d>(c3, nc, 1);
    s3->add(b.cls1);
    s3->add(b.cls2);
    s3->add(b.cls_out);
    branches.push_back(b);
  }
  // dfl.conv.weight (1, 16, 1, 1) = 0, 1, ..., 15: a parameter that never trains (as torch's
  // requires_grad_(False)); the loss and decoding use the fixed integral directly.
  auto dfl = register_module("dfl", std::make_shared<ModuleDict>());
  dfl_conv = dfl->add("conv", std::make_shared<Conv2d>(kRegMax, 1, 1, 1, 0, false));
  float* w = dfl_conv->weight.data<float>();
  for (int64_t j = 0; j < kRegMax; ++j) w[j] = static_cast<float>(j);
  dfl_conv->weight.set_requires_grad(false);
  // Ultralytics' bias_init: box 2.0; class log(5 / nc / (640 / stride)^2).
  for (size_t i = 0; i < branches.size(); ++i) {
    float* bb = branches[i].box_out->bias.data<float>();
    for (int64_t j = 0; j < 4 * kRegMax; ++j) bb[j] = 2.0f;
    const double s = static_cast<double>(kStrides[i]);
    float* cb = branches[i].cls_out->bias.data<float>();
    for (int64_t j = 0; j < nc; ++j)
      cb[j] = static_cast<float>(std::log(5.0 / static_cast<double>(nc) / std::pow(640.0 / s, 2)));
  }
}

Outputs YoloDetect::forward_levels(const Outputs& feats) {
  HPCNET_REQUIRE(feats.size() == branches.size(), "yolo Detect: expected " +
                                                      std::to_string(branches.size()) +
                                                      " feature maps, got " +
                                                      std::to_string(feats.size()));
  std::vector<Tensor> boxes, scores;
  for (size_t i = 0; i < branches.size(); ++i) {
    const Branch& b = branches[i];
    const Tensor& x = feats[i];
    const int64_t B = x.size(0), hw = x.size(2) * x.size(3);
    Tensor box = b.box_out->forward(b.box2->forward(b.box1->forward(x)));
    Tensor cls = b.cls_out->forward(b.cls2->forward(b.cls1->forward(x)));
    boxes.push_back(F::reshape(box, {B, 4 * kRegMax, hw}));
    scores.push_back(F::reshape(cls, {B, nc, hw}));
  }
  return {F::cat(boxes, 2), F::cat(scores, 2)};
}

Tensor YoloDetect::forward(const Tensor&) {
  throw InputError("yolo Detect takes the three feature maps: call forward_levels");
}

YoloV8::YoloV8(double depth, double width, int64_t max_channels, int64_t num_classes) {
  auto ch = [&](int64_t c) { return make_divisible(static_cast<double>(std::min(c, max_channels)) * width); };
  auto rep = [&](int64_t n) { return std::max<int64_t>(std::llround(static_cast<double>(n) * depth), 1); };
  auto model = register_module("model", std::make_shared<ModuleDict>());
  auto conv = [&](int idx, int64_t c1, int64_t c2, int64_t k, int64_t s) {
    return model->add(std::to_string(idx), std::make_shared<YoloConv>(c1, c2, k, s));
  };
  auto c2f = [&](int idx, int64_t c1, int64_t c2, int64_t n, bool shortcut) {
    return model->add(std::to_string(idx), std::make_shared<C2f>(c1, c2, n, shortcut));
  };
  const int64_t w64 = ch(64), w128 = ch(128), w256 = ch(256), w512 = ch(512), w1024 = ch(1024);
  // backbone
  l0 = conv(0, 3, w64, 3, 2);
  l1 = conv(1, w64, w128, 3, 2);
  l2 = c2f(2, w128, w128, rep(3), true);
  l3 = conv(3, w128, w256, 3, 2);
  l4 = c2f(4, w256, w256, rep(6), true);  // P3/8
  l5 = conv(5, w256, w512, 3, 2);
  l6 = c2f(6, w512, w512, rep(6), true);  // P4/16
  l7 = conv(7, w512, w1024, 3, 2);
  l8 = c2f(8, w1024, w1024, rep(3), true);
  l9 = model->add("9", std::make_shared<Sppf>(w1024, w1024, 5));  // P5/32
  // head (10 and 13 upsample, 11/14/17/20 concat: no parameters)
  l12 = c2f(12, w1024 + w512, w512, rep(3), false);
  l15 = c2f(15, w512 + w256, w256, rep(3), false);  // P3 out
  l16 = conv(16, w256, w256, 3, 2);
  l18 = c2f(18, w256 + w512, w512, rep(3), false);  // P4 out
  l19 = conv(19, w512, w512, 3, 2);
  l21 = c2f(21, w512 + w1024, w1024, rep(3), false);  // P5 out
  detect = model->add("22", std::make_shared<YoloDetect>(num_classes,
                                                          std::vector<int64_t>{w256, w512, w1024}));
}

Outputs YoloV8::forward_all(const Tensor& x) {
  HPCNET_REQUIRE(x.dim() == 4 && x.size(1) == 3 && x.size(2) % 32 == 0 && x.size(3) % 32 == 0,
                 "yolov8 takes (N, 3, H, W) images with H and W multiples of 32, got " +
                     shape_str(x.shape()));
  Tensor y = l2->forward(l1->forward(l0->forward(x)));
  if (in_place(x, *l0)) return predict_in_place(y);
  Tensor p3 = l4->forward(l3->forward(y));
  Tensor p4 = l6->forward(l5->forward(p3));
  Tensor p5 = l9->forward(l8->forward(l7->forward(p4)));
  Tensor h12 = l12->forward(F::cat({F::upsample_nearest2d(p5, 2), p4}, 1));
  Tensor h15 = l15->forward(F::cat({F::upsample_nearest2d(h12, 2), p3}, 1));
  Tensor h18 = l18->forward(F::cat({l16->forward(h15), h12}, 1));
  Tensor h21 = l21->forward(F::cat({l19->forward(h18), p5}, 1));
  return detect->forward_levels({h15, h18, h21});
}

Outputs YoloV8::predict_in_place(const Tensor& y) {
  // The neck's four concatenations at predict time (one image): each buffer is allocated before
  // its pieces are made, and each piece is written in its place by the layer that makes it (p3,
  // p4 and p5 by the last convolutions of layers 4, 6 and 9; the upsampled maps; layers 12, 16
  // and 19), so no concatenation is copied. Layers 15, 18 and 21 read the buffers.
  const int64_t H = y.size(2), W = y.size(3);  // y: stride 4
  const int64_t c3 = out_channels(*l4->cv2), c4 = out_channels(*l6->cv2),
                c5 = out_channels(*l9->cv2), c12 = out_channels(*l12->cv2),
                c16 = out_channels(*l16), c19 = out_channels(*l19);
  const Layout layout = y.layout();  // the layout the backbone's convolutions leave
  Tensor cat11 = concat_buffer(layout, {c5, c4}, H / 4, W / 4, y),
         cat14 = concat_buffer(layout, {c12, c3}, H / 2, W / 2, y),
         cat17 = concat_buffer(layout, {c16, c12}, H / 4, W / 4, y),
         cat20 = concat_buffer(layout, {c19, c5}, H / 8, W / 8, y);
  auto upsample_into = [](const Tensor& src, Tensor dst) {
    ops::upsample_nearest2d_forward(ops::as_layout(src, dst), dst, 2);
  };
  Tensor p3 = channel_slice(cat14, c12, c3), p4 = channel_slice(cat11, c5, c4),
         p5 = channel_slice(cat20, c19, c5), h12 = channel_slice(cat17, c16, c12);
  l4->forward_into(l3->forward(y), p3);
  l6->forward_into(l5->forward(p3), p4);
  l9->forward_into(l8->forward(l7->forward(p4)), p5);
  upsample_into(p5, channel_slice(cat11, 0, c5));
  l12->forward_into(cat11, h12);
  upsample_into(h12, channel_slice(cat14, 0, c12));
  Tensor h15 = l15->forward(cat14);
  Tensor d16 = channel_slice(cat17, 0, c16), d19 = channel_slice(cat20, 0, c19);
  l16->forward_into(h15, d16);
  Tensor h18 = l18->forward(cat17);
  l19->forward_into(h18, d19);
  Tensor h21 = l21->forward(cat20);
  return detect->forward_levels({h15, h18, h21});
}

Tensor YoloV8::forward(const Tensor& x) { return forward_all(x)[1]; }

}  // namespace hpcnet::nn
