// The modules of Ultralytics' YOLO vocabulary (8.4) under its parameter names: Conv (DWConv with
// groups), Bottleneck, C2f, C3k2, C3 / C3k, SPPF and the Detect head (legacy v8 and yolo11's);
// Attention, PSABlock and C2PSA are in yolo_attention.cpp, the graph in yolo_graph.cpp.
// At predict time (eval, no graph, CPU float32) every Conv runs with its BatchNorm folded and
// SiLU fused, and for one image the concatenations inside C2f/C3k2 are written in place: each
// piece is written by the layer that makes it into its slice of the buffer cv2 reads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "src/nn/models/models.h"
#include "src/nn/models/yolo_internal.h"
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

std::atomic<bool> g_concat_in_place{true};
std::atomic<bool> g_int8_calibration{false};

// The largest |x| of a float32 tensor (any layout: every stored value is one of its elements).
float max_abs(const Tensor& x) {
  const Tensor d = x.is_dense() ? x : x.contiguous();
  const float* p = static_cast<const float*>(d.raw_data());
  float m = 0;
  for (int64_t i = 0; i < d.numel(); ++i) m = std::max(m, std::fabs(p[i]));
  return m;
}

ops::Conv2dParams conv_params(const Conv2d& c) {
  return {c.stride, c.stride, c.padding, c.padding, c.dilation, c.dilation};
}

}  // namespace

void set_inference_fusion(bool on) { fuse_flag().store(on); }
void set_concat_in_place(bool on) { g_concat_in_place.store(on); }
void set_int8_calibration(bool on) { g_int8_calibration.store(on); }

std::map<std::string, double> int8_ranges(Module& model) {
  std::map<std::string, double> out;
  for (auto& [name, m] : model.named_modules())
    if (const auto* c = dynamic_cast<const YoloConv*>(m); c && c->int8_input_max > 0)
      out[name] = c->int8_input_max;
  return out;
}

void set_int8_ranges(Module& model, const std::map<std::string, double>& ranges) {
  std::map<std::string, YoloConv*> convs;
  for (auto& [name, m] : model.named_modules())
    if (auto* c = dynamic_cast<YoloConv*>(m); c && c->int8_capable()) convs[name] = c;
  for (const auto& [name, v] : ranges) {
    auto it = convs.find(name);
    HPCNET_REQUIRE(it != convs.end(), "int8 calibration names '" + name +
                                          "', which is no int8-capable Conv of this model");
    HPCNET_REQUIRE(std::isfinite(v) && v > 0,
                   "int8 calibration of '" + name + "' is not a positive number");
    it->second->int8_input_max = static_cast<float>(v);
  }
}

namespace yolo_detail {

int64_t make_divisible(double x) { return static_cast<int64_t>(std::ceil(x / 8.0)) * 8; }

bool in_place(const Tensor& x, const YoloConv& conv) {
  return x.dim() == 4 && x.size(0) == 1 && conv.folds() &&
         g_concat_in_place.load(std::memory_order_relaxed);
}

Tensor concat_buffer(Layout layout, const std::vector<int64_t>& pieces, int64_t h, int64_t w,
                     const Tensor& like) {
  int64_t channels = 0;
  for (int64_t c : pieces) {
    channels += c;
    if (c % 16 != 0) layout = Layout::kStrided;
  }
  return Tensor::empty_layout({1, channels, h, w}, like.dtype(), like.device(), layout);
}

Tensor channel_slice(const Tensor& buf, int64_t start, int64_t length) {
  Tensor v = F::narrow(buf, 1, start, length);
  HPCNET_CHECK(v.impl()->storage == buf.impl()->storage, "yolo: a slice of a buffer is not a view");
  return v;
}

void copy_into(const Tensor& y, Tensor& out) { ops::cat_forward({ops::as_layout(y, out)}, out, 1); }

}  // namespace yolo_detail

using yolo_detail::channel_slice;
using yolo_detail::concat_buffer;
using yolo_detail::in_place;

void YoloLayer::forward_into(const Tensor& x, Tensor& out) {
  yolo_detail::copy_into(forward(x), out);
}

YoloConv::YoloConv(int64_t c1, int64_t c2, int64_t k, int64_t s, bool act, int64_t g, int64_t p,
                   int64_t d)
    : act(act), groups(g) {
  HPCNET_REQUIRE(g >= 1 && c1 % g == 0 && c2 % g == 0,
                 "Conv: groups " + std::to_string(g) + " must divide " + std::to_string(c1) +
                     " and " + std::to_string(c2) + " channels");
  const int64_t pad = p >= 0 ? p : (d > 1 ? d * (k - 1) + 1 : k) / 2;  // Ultralytics' autopad
  conv = register_module("conv", std::make_shared<Conv2d>(c1, c2, k, s, pad, false, d, g));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(c2, 1e-3, 0.03));
}

bool YoloConv::int8_capable() const { return groups == 1 && conv->weight.size(1) >= 16; }

ops::Conv2dParams YoloConv::folded_params(const Tensor& x) {
  ops::Conv2dParams p = conv_params(*conv);
  if (!int8_capable()) return p;
  if (g_int8_calibration.load(std::memory_order_relaxed))
    int8_input_max = std::max(int8_input_max, max_abs(x));
  else if (int8_input_max > 0 && ops::int8_inference() && x.dtype() == DType::kFloat32)
    p.int8_scale = int8_input_max / 127.f;
  return p;
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
    if (groups > 1) {  // depthwise (DWConv): the folded weights, SiLU after
      Tensor y = F::depthwise_conv2d(x, w, b, conv->stride, conv->padding, conv->dilation);
      return act ? F::silu(y) : y;
    }
    const ops::Conv2dParams p = folded_params(x);
    if (p.int8_scale > 0) {  // --precision int8, calibrated
      const Tensor xd = x.is_dense() ? x : x.contiguous();
      Tensor y = Tensor::empty_layout(
          {x.size(0), w.size(0),
           ops::conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h, p.dil_h),
           ops::conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w, p.dil_w)},
          DType::kFloat32, x.device(), ops::conv2d_output_layout(xd, w.shape(), p));
      ops::conv2d_into(xd, w, b, p, act ? ops::Act::kSilu : ops::Act::kNone, y);
      return y;
    }
    return act ? F::conv2d_silu(x, w, b, conv->stride, conv->padding, conv->dilation)
               : F::conv2d(x, w, b, conv->stride, conv->padding, conv->dilation);
  }
  Tensor y = bn->forward(conv->forward(x));
  return act ? F::silu(y) : y;
}

void YoloConv::forward_into(const Tensor& x, Tensor& out) {
  if (!folds() || groups > 1) return YoloLayer::forward_into(x, out);
  const auto [w, b] = folded_weights();
  ops::conv2d_into(x.is_dense() ? x : x.contiguous(), w, b, folded_params(x),
                   act ? ops::Act::kSilu : ops::Act::kNone, out);
}

std::pair<Tensor, Tensor> YoloConv::folded_weights() const {
  // w' = w g / sqrt(v + eps) per output channel, b' = beta - m g / sqrt(v + eps).
  const Tensor w = conv->weight.contiguous();
  const int64_t k = w.size(0), per = w.numel() / k;
  Tensor fw = Tensor::empty(w.shape()), fb = Tensor::empty({k});
  const float *src = w.data<float>(), *g = bn->weight.contiguous().data<float>(),
              *beta = bn->bias.contiguous().data<float>(),
              *mean = bn->running_mean.contiguous().data<float>(),
              *var = bn->running_var.contiguous().data<float>();
  float *dst = fw.data<float>(), *bias = fb.data<float>();
  // The scale in double, the weights scaled in float (a vectorised pass: about 1.1 ms for all of
  // yolov8n's Convs on one core, 1.9 ms with the products in double; within one float rounding).
  for (int64_t o = 0; o < k; ++o) {
    const double scale = g[o] / std::sqrt(static_cast<double>(var[o]) + bn->eps);
    const float fscale = static_cast<float>(scale);
    const float* s = src + o * per;
    float* d = dst + o * per;
    for (int64_t i = 0; i < per; ++i) d[i] = s[i] * fscale;
    bias[o] = static_cast<float>(beta[o] - mean[o] * scale);
  }
  return {fw, fb};
}

void YoloSequential::add(std::shared_ptr<YoloLayer> m) {
  items.push_back(register_module(std::to_string(items.size()), std::move(m)));
}

Tensor YoloSequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : items) y = m->forward(y);
  return y;
}

void YoloSequential::forward_into(const Tensor& x, Tensor& out) {
  Tensor y = x;
  for (size_t i = 0; i + 1 < items.size(); ++i) y = items[i]->forward(y);
  items.back()->forward_into(y, out);
}

YoloBottleneck::YoloBottleneck(int64_t c1, int64_t c2, bool shortcut, int64_t g, int64_t k1,
                               int64_t k2, double e)
    : add(shortcut && c1 == c2) {
  const auto c_ = static_cast<int64_t>(static_cast<double>(c2) * e);
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, c_, k1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(c_, c2, k2, 1, true, g));
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

C2f::C2f(int64_t c1, int64_t c2, int64_t n, double e)
    : c(static_cast<int64_t>(static_cast<double>(c2) * e)) {
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, 2 * c, 1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>((2 + n) * c, c2, 1));
  register_module("m", std::make_shared<ModuleDict>());
}

void C2f::add_block(std::shared_ptr<YoloLayer> b) {
  auto list = std::static_pointer_cast<ModuleDict>(children().back().second);
  m.push_back(list->add(std::to_string(m.size()), std::move(b)));
}

C2f::C2f(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e)
    : C2f(c1, c2, n, e) {
  for (int64_t i = 0; i < n; ++i)
    add_block(std::make_shared<YoloBottleneck>(c, c, shortcut, g, 3, 3, 1.0));
}

C3k2::C3k2(int64_t c1, int64_t c2, int64_t n, bool c3k, double e, bool attn, int64_t g,
           bool shortcut)
    : C2f(c1, c2, n, e) {
  for (int64_t i = 0; i < n; ++i) {
    if (attn) {
      auto pair = std::make_shared<YoloSequential>();
      pair->add(std::make_shared<YoloBottleneck>(c, c, shortcut, g));
      pair->add(std::make_shared<PsaBlock>(c, 0.5, std::max<int64_t>(c / 64, 1)));
      add_block(pair);
    } else if (c3k) {
      add_block(std::make_shared<C3>(c, c, 2, shortcut, g, 0.5, 3, 3));
    } else {
      add_block(std::make_shared<YoloBottleneck>(c, c, shortcut, g));
    }
  }
}

Tensor C2f::concat_in_place(const Tensor& x) {
  // Predict time, one image: the concatenation without a copy. Its (2 + n) c channels are
  // allocated first and every piece is written in its place: cv1's two halves at the start,
  // each block's output after them (channel slices of one image are runs of memory, in NCHW
  // and, in whole 16-channel blocks, in the blocked layout). The buffer is the cat.
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
  // blocks' outputs. The two halves side by side are that output itself, so it goes into the
  // concatenation whole; only the second half, the first block's input, is sliced out.
  if (in_place(x, *cv1)) return cv2->forward(concat_in_place(x));
  Tensor y = cv1->forward(x);
  std::vector<Tensor> ys = {y};
  Tensor h = F::narrow(y, 1, c, c);
  for (auto& b : m) ys.push_back(h = b->forward(h));
  return cv2->forward(F::cat(ys, 1));
}

void C2f::forward_into(const Tensor& x, Tensor& out) {
  if (!in_place(x, *cv1)) return YoloLayer::forward_into(x, out);
  cv2->forward_into(concat_in_place(x), out);
}

C3::C3(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, int64_t k1,
       int64_t k2) {
  const auto c_ = static_cast<int64_t>(static_cast<double>(c2) * e);
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, c_, 1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(c1, c_, 1));
  cv3 = register_module("cv3", std::make_shared<YoloConv>(2 * c_, c2, 1));
  m = register_module("m", std::make_shared<YoloSequential>());
  for (int64_t i = 0; i < n; ++i)
    m->add(std::make_shared<YoloBottleneck>(c_, c_, shortcut, g, k1, k2, 1.0));
}

Tensor C3::pieces(const Tensor& x) {
  return F::cat({m->forward(cv1->forward(x)), cv2->forward(x)}, 1);
}
Tensor C3::forward(const Tensor& x) { return cv3->forward(pieces(x)); }
void C3::forward_into(const Tensor& x, Tensor& out) { cv3->forward_into(pieces(x), out); }

Sppf::Sppf(int64_t c1, int64_t c2, int64_t k, int64_t n, bool shortcut, bool cv1_act)
    : n(n), add(shortcut && c1 == c2) {
  const int64_t h = c1 / 2;
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, h, 1, 1, cv1_act));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(h * (n + 1), c2, 1));
  pool = register_module("m", std::make_shared<MaxPool2d>(k, 1, k / 2));
}

Tensor Sppf::pyramid(const Tensor& x) {
  std::vector<Tensor> ys = {cv1->forward(x)};
  for (int64_t i = 0; i < n; ++i) ys.push_back(pool->forward(ys.back()));
  return F::cat(ys, 1);
}

Tensor Sppf::forward(const Tensor& x) {
  Tensor y = cv2->forward(pyramid(x));
  return add ? F::add(y, x) : y;
}

void Sppf::forward_into(const Tensor& x, Tensor& out) {
  if (add) return YoloLayer::forward_into(x, out);
  cv2->forward_into(pyramid(x), out);
}

YoloDetect::YoloDetect(int64_t nc, const std::vector<int64_t>& ch, bool legacy)
    : nc(nc), legacy(legacy) {
  const int64_t c2 = std::max<int64_t>({16, ch[0] / 4, 4 * kRegMax});
  const int64_t c3 = std::max<int64_t>(ch[0], std::min<int64_t>(nc, 100));
  auto l2 = register_module("cv2", std::make_shared<ModuleDict>());
  auto l3 = register_module("cv3", std::make_shared<ModuleDict>());
  for (size_t i = 0; i < ch.size(); ++i) {
    // Built level by level, box branch then class branch (the order of hpcnet's first yolov8,
    // which fixes the initial weights' random draws).
    Branch b;
    auto s2 = l2->add(std::to_string(i), std::make_shared<Sequential>());
    b.box = {std::make_shared<YoloConv>(ch[i], c2, 3), std::make_shared<YoloConv>(c2, c2, 3)};
    b.box_out = std::make_shared<Conv2d>(c2, 4 * kRegMax, 1);
    for (auto& cv : b.box) s2->add(cv);
    s2->add(b.box_out);
    auto s3 = l3->add(std::to_string(i), std::make_shared<Sequential>());
    if (legacy) {
      b.cls = {std::make_shared<YoloConv>(ch[i], c3, 3), std::make_shared<YoloConv>(c3, c3, 3)};
      for (auto& cv : b.cls) s3->add(cv);
    } else {  // (DWConv 3x3, Conv 1x1) twice
      for (int64_t cin : {ch[i], c3}) {
        auto pair = std::make_shared<Sequential>();
        b.cls.push_back(std::make_shared<YoloConv>(cin, cin, 3, 1, true, cin));
        b.cls.push_back(std::make_shared<YoloConv>(cin, c3, 1));
        pair->add(b.cls[b.cls.size() - 2]);
        pair->add(b.cls.back());
        s3->add(pair);
      }
    }
    b.cls_out = std::make_shared<Conv2d>(c3, nc, 1);
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
  HPCNET_REQUIRE(feats.size() == branches.size(),
                 "yolo Detect: expected " + std::to_string(branches.size()) +
                     " feature maps, got " + std::to_string(feats.size()));
  std::vector<Tensor> boxes, scores;
  for (size_t i = 0; i < branches.size(); ++i) {
    const Branch& b = branches[i];
    const int64_t B = feats[i].size(0), hw = feats[i].size(2) * feats[i].size(3);
    Tensor box = feats[i], cls = feats[i];
    for (auto& cv : b.box) box = cv->forward(box);
    for (auto& cv : b.cls) cls = cv->forward(cls);
    boxes.push_back(F::reshape(b.box_out->forward(box), {B, 4 * kRegMax, hw}));
    scores.push_back(F::reshape(b.cls_out->forward(cls), {B, nc, hw}));
  }
  return {F::cat(boxes, 2), F::cat(scores, 2)};
}

Tensor YoloDetect::forward(const Tensor&) {
  throw InputError("yolo Detect takes the three feature maps: call forward_levels");
}

}  // namespace hpcnet::nn
