// CPU 2-D convolution: float32 through oneDNN (forward with fused bias and optional ReLU or SiLU,
// backward data, backward weights with bias), float64 through reference loops. Tensors are plain
// NCHW / OIHW; oneDNN primitives are cached per shape.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/dnnl_util.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/conv2d/cpu_direct.h"
#include "src/ops/elementwise/math.h"

namespace hpcnet::cpu {
namespace {

using dnnl::memory;

struct ConvShape {
  int64_t n, c, h, w, k, r, s, p, q;
};

ConvShape conv_shape(const Tensor& x, const Shape& wshape, const Shape& yshape) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), wshape[0],
          wshape[2], wshape[3], yshape[2], yshape[3]};
}

double conv_macs(const ConvShape& s) {
  return static_cast<double>(s.n) * s.k * s.p * s.q * s.c * s.r * s.s;
}

// The `variant` of a convolution's key: bf16, the two operands' layout and dtype bits, and the
// --conv-algorithm setting (a change of setting builds new primitives). The setting is read once
// per call by the caller and given both here and to requested_algorithm, so the key and the
// primitive built under it always agree.
int conv_variant(bool bf16, int first_bits, int second_bits, ops::ConvAlgorithm setting) {
  return bf16 + 2 * first_bits + 8 * second_bits + 32 * static_cast<int>(setting);
}

// `variant`: conv_variant's.
DnnlKey conv_key(int kind, const ConvShape& s, const Conv2dParams& p, bool bias, Act act,
                 int variant) {
  return make_key(kind, s.n, s.c, s.h, s.w, s.k, s.r, s.s, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                  p.dil_h, p.dil_w, bias, static_cast<int>(act), variant);
}

// Descriptors of a convolution: the tensors' own (plain NCHW / OIHW f32) and the ones the
// primitive is created with (format "any", so oneDNN picks its blocked layouts; bf16 inputs when
// the conv precision is bf16). DnnlOp stages between the two with reorders.
struct ConvMds {
  memory::desc w, b;                            // plain f32 (activations: user_md of each tensor)
  memory::desc x_any, w_any, y_any;             // for the primitive: inputs in `in`, outputs in f32
  memory::desc x_any_out, w_any_out;            // x / w as outputs of a backward (f32)
  memory::desc y_any_in;                        // y as an input of a backward (dy, in `in`)
  memory::dims strides, dilates, pad_l, pad_r;  // dilates in oneDNN's convention (0 = none)
};

ConvMds conv_mds(const ConvShape& s, const Conv2dParams& p, bool bf16) {
  using dt = memory::data_type;
  using tag = memory::format_tag;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  ConvMds m;
  memory::dims xd{s.n, s.c, s.h, s.w}, wd{s.k, s.c, s.r, s.s}, yd{s.n, s.k, s.p, s.q};
  m.w = plain_md(wd);
  m.b = plain_md({s.k});
  m.x_any = memory::desc(xd, in, tag::any);
  m.w_any = memory::desc(wd, in, tag::any);
  m.y_any = memory::desc(yd, dt::f32, tag::any);
  m.x_any_out = memory::desc(xd, dt::f32, tag::any);
  m.w_any_out = memory::desc(wd, dt::f32, tag::any);
  m.y_any_in = memory::desc(yd, in, tag::any);
  m.strides = {p.stride_h, p.stride_w};
  m.dilates = {p.dil_h - 1, p.dil_w - 1};
  m.pad_l = {p.pad_h, p.pad_w};
  // Right padding so that oneDNN's output size matches floor((H + 2p - d (R - 1) - 1) / stride)
  // + 1 (the dilated kernel spans d (R - 1) + 1 pixels).
  m.pad_r = {(s.p - 1) * p.stride_h + p.dil_h * (s.r - 1) + 1 - s.h - p.pad_h,
             (s.q - 1) * p.stride_w + p.dil_w * (s.s - 1) + 1 - s.w - p.pad_w};
  return m;
}

// The oneDNN algorithm --conv-algorithm asks for on this convolution (see ops::ConvAlgorithm):
// bfloat16 ones and those outside Winograd's 3x3, stride 1, undilated shapes are direct.
dnnl::algorithm requested_algorithm(const ConvShape& s, const Conv2dParams& p, bool bf16,
                                    ops::ConvAlgorithm setting) {
  using dnnl::algorithm;
  const bool wino_shape = s.r == 3 && s.s == 3 && p.stride_h == 1 && p.stride_w == 1 &&
                          p.dil_h == 1 && p.dil_w == 1;
  if (bf16 || !wino_shape) return algorithm::convolution_direct;
  switch (setting) {
    case ops::ConvAlgorithm::kWinograd:
      return algorithm::convolution_winograd;
    case ops::ConvAlgorithm::kAuto:
      return algorithm::convolution_auto;
    default:
      return algorithm::convolution_direct;
  }
}

// Builds a primitive descriptor with `make(algorithm)`; where oneDNN has no implementation of a
// non-direct algorithm for the shape or post-ops, the direct one.
template <class Make>
auto with_fallback(dnnl::algorithm alg, Make&& make) {
  if (alg != dnnl::algorithm::convolution_direct) {
    try {
      return make(alg);
    } catch (const dnnl::error&) {
    }
  }
  return make(dnnl::algorithm::convolution_direct);
}

// A forward convolution's attributes with its fused activation as a post-op (none: empty).
dnnl::primitive_attr act_attr(Act act) {
  using namespace dnnl;
  primitive_attr attr;
  if (act != Act::kNone) {
    // eltwise_swish(alpha) is x sigmoid(alpha x): SiLU at alpha 1.
    post_ops po;
    if (act == Act::kRelu) po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    if (act == Act::kSilu) po.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
    attr.set_post_ops(po);
  }
  return attr;
}

// The forward primitive descriptor (also the hint for the backward ones, which take the
// algorithm it ended up with).
dnnl::convolution_forward::primitive_desc conv_fwd_pd(const ConvMds& m, bool bias,
                                                       dnnl::algorithm alg, Act act = Act::kNone) {
  using namespace dnnl;
  const primitive_attr attr = act_attr(act);
  return with_fallback(alg, [&](algorithm a) {
    auto d = bias ? convolution_forward::desc(prop_kind::forward_training, a, m.x_any, m.w_any,
                                              m.b, m.y_any, m.strides, m.dilates, m.pad_l,
                                              m.pad_r)
                  : convolution_forward::desc(prop_kind::forward_training, a, m.x_any, m.w_any,
                                              m.y_any, m.strides, m.dilates, m.pad_l, m.pad_r);
    return convolution_forward::primitive_desc(d, attr, dnnl_engine());
  });
}

// The algorithm the backward passes of a convolution use: the one its forward got (oneDNN names
// its Winograd implementations "...wino...").
dnnl::algorithm backward_algorithm(const dnnl::convolution_forward::primitive_desc& fwd) {
  const bool winograd = std::string(fwd.impl_info_str()).find("wino") != std::string::npos;
  return winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
}

// Whether this convolution computes in bfloat16. With --precision bf16, convolutions whose input
// channels fill oneDNN's 16-wide blocks and whose stride is 1 do; the RGB stem (C = 3) and the
// strided down-sampling convolutions stay float32, because oneDNN 2.6's bf16 kernels for them
// are slower than its float32 ones (backward weights of the stride-2 3x3s: about 1 s per call
// on this 2-core AVX512-BF16 machine, against 0.1 s in float32; measured with ONEDNN_VERBOSE).
bool conv_bf16(int64_t c, const Conv2dParams& p) {
  return ops::conv_precision() == ops::Precision::kBFloat16 && c % 16 == 0 && p.stride_h == 1 &&
         p.stride_w == 1;
}

// Whether an inference convolution (no gradient recorded) computes in bfloat16, under --precision
// bf16: conv_bf16's (stride 1, a multiple of 16 input channels) and the strided ones with 32 or
// more input channels in multiples of 16, where oneDNN 2.6 runs its AMX kernels (brgconv); the
// RGB stem (3 channels) and the 16-channel stride-2 convolution stay float32, slower in bf16.
// yolov8n at 640 px, one thread, per forward (ONEDNN_VERBOSE): the stride-2 3x3s with 32 to 128
// input channels 0.9-2.1 ms float32 -> 0.3-0.7 ms bf16; the stem 3.7 -> 4.2 ms plus a 1.0 ms
// reorder; 16 -> 32 channels at stride 2 2.4 -> 5.9 ms. HPCNET_INFER_BF16=train keeps the
// training rule (conv_bf16), for measurements.
bool conv_inference_bf16(int64_t c, const Conv2dParams& p) {
  if (ops::conv_precision() != ops::Precision::kBFloat16) return false;
  static const bool train_rule = [] {
    const char* e = std::getenv("HPCNET_INFER_BF16");
    return e && std::string(e) == "train";
  }();
  return conv_bf16(c, p) || (!train_rule && c % 16 == 0 && c >= 32);
}

std::atomic<bool>& blocked_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("HPCNET_BLOCKED");
    return !(e && std::string(e) == "0");
  }()};
  return on;
}
bool blocked_enabled() { return blocked_flag().load(); }

// The user-side descriptor of a tensor: plain NCHW or nChw16c.
memory::desc user_md(const Tensor& t) {
  const auto dt = t.dtype() == DType::kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
  return memory::desc(
      {t.size(0), t.size(1), t.size(2), t.size(3)}, dt,
      t.layout() == Layout::kBlocked16 ? memory::format_tag::nChw16c : memory::format_tag::nchw);
}

// Layout and dtype of a conv operand as two bits of the primitive key.
int operand_bits(const Tensor& t) {
  return static_cast<int>(t.layout()) + 2 * (t.dtype() == DType::kBFloat16);
}

bool use_direct(const Shape& x, const Shape& w, const Conv2dParams& p) {
  if (p.bf16 || conv_bf16(w[1], p)) return false;  // bfloat16 runs on oneDNN's kernels only
  switch (conv_algo()) {
    case ConvAlgo::kOneDnn:
      return false;
    case ConvAlgo::kDirect:
      HPCNET_CHECK(conv2d_direct_applies(x, w, p), "direct conv does not apply");
      return true;
    default:
      // An RGB stem with 16k output channels on a large batch (the ResNets' conv1) runs on
      // oneDNN, whose output stays blocked for the layers after it: resnet20 at batch 128 on 2
      // threads, 257 -> 226 ms/step in fp32 and 214 -> 173 in bf16 (hpcnet bench --no-profile).
      if (x[1] <= 4 && w[0] % 16 == 0 && x[0] >= 32) return false;
      return conv2d_direct_applies(x, w, p);
  }
}

// ---- float64 reference loops ----

void conv_fwd_ref(const ConvShape& s, const Conv2dParams& p, const double* x, const double* w,
                  const double* b, double* y, Act act) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t oh = 0; oh < s.p; ++oh)
        for (int64_t ow = 0; ow < s.q; ++ow) {
          double acc = b ? b[k] : 0.0;
          for (int64_t c = 0; c < s.c; ++c)
            for (int64_t r = 0; r < s.r; ++r) {
              int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t t = 0; t < s.s; ++t) {
                int64_t iw = ow * p.stride_w - p.pad_w + t * p.dil_w;
                if (iw < 0 || iw >= s.w) continue;
                acc += x[((n * s.c + c) * s.h + ih) * s.w + iw] *
                       w[((k * s.c + c) * s.r + r) * s.s + t];
              }
            }
          if (act == Act::kRelu && acc < 0) acc = 0;
          if (act == Act::kSilu) acc = math::silu(acc);
          y[((n * s.k + k) * s.p + oh) * s.q + ow] = acc;
        }
}

// Calls f(x_index, w_index, y_index) for every multiply-accumulate of the convolution.
template <class F>
void conv_for_each_mac(const ConvShape& s, const Conv2dParams& p, F&& f) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t oh = 0; oh < s.p; ++oh)
        for (int64_t ow = 0; ow < s.q; ++ow) {
          int64_t yi = ((n * s.k + k) * s.p + oh) * s.q + ow;
          for (int64_t c = 0; c < s.c; ++c)
            for (int64_t r = 0; r < s.r; ++r) {
              int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t t = 0; t < s.s; ++t) {
                int64_t iw = ow * p.stride_w - p.pad_w + t * p.dil_w;
                if (iw < 0 || iw >= s.w) continue;
                f(((n * s.c + c) * s.h + ih) * s.w + iw, ((k * s.c + c) * s.r + r) * s.s + t, yi);
              }
            }
        }
}

// ---- int8 inference (Conv2dParams::int8_scale) ----

// Per output channel k of a float32 (K, C, R, S) weight: 127 / max |w[k]| (1 for a zero channel).
std::vector<float> int8_weight_scales(const Tensor& w) {
  const Tensor wc = w.contiguous();
  const int64_t K = wc.size(0), per = wc.numel() / K;
  const float* pw = wc.data<float>();
  std::vector<float> q(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    float m = 0;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(pw[k * per + i]));
    q[static_cast<size_t>(k)] = m > 0 ? 127.f / m : 1.f;
  }
  return q;
}

// The quantisation a primitive was built for, as one key integer (FNV-1a of the scales' bits):
// weights that change (other scales) get primitives of their own.
int64_t scales_key(const std::vector<float>& wq, float sx) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    h = (h ^ u) * 1099511628211ULL;
  };
  for (float v : wq) mix(v);
  mix(sx);
  return static_cast<int64_t>(h >> 1);
}

// y = act(conv(x, w) + b) with x and w quantised to int8: x per tensor (round(x / sx), the
// reorder's output scale 1 / sx, saturated to [-128, 127]), w per output channel (times wq[k]);
// oneDNN accumulates in int32 and scales each output channel by sx / wq[k]. oneDNN 2.x adds the
// bias before that scale, so it is given in the accumulator's units, b[k] wq[k] / sx.
void conv_forward_int8(const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                       Tensor& y, const Conv2dParams& p, Act act) {
  using namespace dnnl;
  using dt = memory::data_type;
  const bool has_b = b.defined();
  const float sx = p.int8_scale;
  const std::vector<float> wq = int8_weight_scales(w);
  std::vector<float> out_scales(wq.size());
  for (size_t k = 0; k < wq.size(); ++k) out_scales[k] = sx / wq[k];
  Tensor bq;
  if (has_b) {
    const Tensor bc = b.contiguous();
    bq = Tensor::empty({s.k});
    for (int64_t k = 0; k < s.k; ++k)
      bq.data<float>()[k] = bc.data<float>()[k] / out_scales[static_cast<size_t>(k)];
  }
  const DnnlKey key = make_key(3, s.n, s.c, s.h, s.w, s.k, s.r, s.s, p.stride_h, p.stride_w,
                               p.pad_h, p.pad_w, p.dil_h, p.dil_w, has_b, static_cast<int>(act),
                               operand_bits(x) + 4 * operand_bits(y), scales_key(wq, sx));
  DnnlOp& e = dnnl_cached(key, [&](DnnlOp& op) {
    const ConvMds m = conv_mds(s, p, false);
    const memory::desc x8({s.n, s.c, s.h, s.w}, dt::s8, memory::format_tag::any);
    const memory::desc w8({s.k, s.c, s.r, s.s}, dt::s8, memory::format_tag::any);
    primitive_attr attr = act_attr(act);
    attr.set_output_scales(1 << 1, out_scales);  // per channel of the output (its dim 1)
    auto d = has_b ? convolution_forward::desc(prop_kind::forward_inference,
                                               algorithm::convolution_direct, x8, w8, m.b,
                                               m.y_any, m.strides, m.dilates, m.pad_l, m.pad_r)
                   : convolution_forward::desc(prop_kind::forward_inference,
                                               algorithm::convolution_direct, x8, w8, m.y_any,
                                               m.strides, m.dilates, m.pad_l, m.pad_r);
    const convolution_forward::primitive_desc pd(d, attr, dnnl_engine());
    op.prim = convolution_forward(pd);
    primitive_attr qx, qw;
    qx.set_output_scales(0, {1.f / sx});
    qw.set_output_scales(1 << 0, wq);  // per output channel (the weights' dim 0)
    op.add_staged_arg(DNNL_ARG_SRC, user_md(x), pd.src_desc(), true, &qx);
    op.add_staged_arg(DNNL_ARG_WEIGHTS, m.w, pd.weights_desc(), true, &qw);
    if (has_b) op.add_arg(DNNL_ARG_BIAS, m.b);
    op.add_staged_arg(DNNL_ARG_DST, user_md(y), pd.dst_desc(), false);
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_WEIGHTS, w);
  if (has_b) e.bind(DNNL_ARG_BIAS, bq);
  e.bind(DNNL_ARG_DST, y);
  SmallWorkSerial serial(conv_macs(s));
  e.run();
}

}  // namespace

void set_blocked_layouts(bool on) { blocked_flag().store(on); }

bool conv2d_uses_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p) {
  return x.dtype() != DType::kFloat64 && conv_bf16(w[1], p);
}

bool conv2d_inference_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p) {
  return x.dtype() == DType::kFloat32 && conv_inference_bf16(w[1], p);
}

void to_bfloat16(const Tensor& t, Tensor& out) {
  HPCNET_CHECK(t.dtype() == DType::kFloat32 && t.dim() == 4 && t.is_dense(),
               "to_bf16: needs a dense float32 (N, C, H, W) tensor");
  DnnlOp& e = dnnl_cached(
      make_key(7, t.size(0), t.size(1), t.size(2), t.size(3), static_cast<int>(t.layout())),
      [&](DnnlOp& op) {
        memory::desc from = user_md(t), to = user_md(out);
        op.prim =
            dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), from, dnnl_engine(), to));
        op.add_arg(DNNL_ARG_FROM, from);
        op.add_arg(DNNL_ARG_TO, to);
      });
  e.bind(DNNL_ARG_FROM, t);
  e.bind(DNNL_ARG_TO, out);
  e.run();
}

bool conv2d_wants_blocked(const Tensor& x, const Shape& w, const Conv2dParams& p) {
  if (x.dtype() == DType::kFloat64 || w[0] % 16 != 0 || !blocked_enabled()) return false;
  return x.layout() == Layout::kBlocked16 || !use_direct(x.shape(), w, p);
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p, Act act) {
  ConvShape s = conv_shape(x, w.shape(), y.shape());
  bool has_b = b.defined();
  if (x.dtype() == DType::kFloat64) {
    conv_fwd_ref(s, p, x.data<double>(), w.data<double>(), has_b ? b.data<double>() : nullptr,
                 y.data<double>(), act);
    return;
  }
  if (p.int8_scale > 0 && x.dtype() == DType::kFloat32)
    return conv_forward_int8(s, x, w.contiguous(), b, y, p, act);
  const int lx = operand_bits(x), ly = operand_bits(y);
  if (!lx && !ly && use_direct(x.shape(), w.shape(), p)) {
    // The direct kernels fuse ReLU only; SiLU is a pass over their output.
    conv2d_direct_forward(x, w, b, y, p, act == Act::kRelu);
    if (act == Act::kSilu) silu_forward(y, y);
    return;
  }
  const bool bf16 = p.bf16 || conv_bf16(s.c, p) || x.dtype() == DType::kBFloat16;
  const ops::ConvAlgorithm setting = ops::conv_algorithm();
  const DnnlKey key = conv_key(0, s, p, has_b, act, conv_variant(bf16, lx, ly, setting));
  DnnlOp& e = dnnl_cached(key, [&](DnnlOp& op) {
    ConvMds m = conv_mds(s, p, bf16);
    auto pd = conv_fwd_pd(m, has_b, requested_algorithm(s, p, bf16, setting), act);
    op.prim = dnnl::convolution_forward(pd);
    op.add_staged_arg(DNNL_ARG_SRC, user_md(x), pd.src_desc(), true);
    op.add_staged_arg(DNNL_ARG_WEIGHTS, m.w, pd.weights_desc(), true);
    if (has_b) op.add_arg(DNNL_ARG_BIAS, m.b);
    op.add_staged_arg(DNNL_ARG_DST, user_md(y), pd.dst_desc(), false);
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_WEIGHTS, w);
  if (has_b) e.bind(DNNL_ARG_BIAS, b);
  e.bind(DNNL_ARG_DST, y);
  SmallWorkSerial serial(conv_macs(s));
  e.run();
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p) {
  ConvShape s = conv_shape(dx, w.shape(), dy.shape());
  if (dy.dtype() == DType::kFloat64) {
    const double* pdy = dy.data<double>();
    const double* pw = w.data<double>();
    double* pdx = dx.data<double>();
    std::memset(pdx, 0, dx.nbytes());
    conv_for_each_mac(s, p,
                      [&](int64_t xi, int64_t wi, int64_t yi) { pdx[xi] += pdy[yi] * pw[wi]; });
    return;
  }
  const int ly = operand_bits(dy), lx = operand_bits(dx);
  if (!lx && !ly && use_direct(dx.shape(), w.shape(), p))
    return conv2d_direct_backward_data(dy, w, dx, p);
  const bool bf16 = conv_bf16(s.c, p) || dy.dtype() == DType::kBFloat16;
  const ops::ConvAlgorithm setting = ops::conv_algorithm();
  const DnnlKey key = conv_key(1, s, p, false, Act::kNone, conv_variant(bf16, lx, ly, setting));
  DnnlOp& e = dnnl_cached(key, [&](DnnlOp& op) {
    using namespace dnnl;
    ConvMds m = conv_mds(s, p, bf16);
    const auto hint = conv_fwd_pd(m, false, requested_algorithm(s, p, bf16, setting));
    auto pd = with_fallback(backward_algorithm(hint), [&](algorithm a) {
      convolution_backward_data::desc d(a, m.x_any_out, m.w_any, m.y_any_in, m.strides, m.dilates,
                                        m.pad_l, m.pad_r);
      return convolution_backward_data::primitive_desc(d, dnnl_engine(), hint);
    });
    op.prim = convolution_backward_data(pd);
    op.add_staged_arg(DNNL_ARG_DIFF_DST, user_md(dy), pd.diff_dst_desc(), true);
    op.add_staged_arg(DNNL_ARG_WEIGHTS, m.w, pd.weights_desc(), true);
    op.add_staged_arg(DNNL_ARG_DIFF_SRC, user_md(dx), pd.diff_src_desc(), false);
  });
  e.bind(DNNL_ARG_DIFF_DST, dy);
  e.bind(DNNL_ARG_WEIGHTS, w);
  e.bind(DNNL_ARG_DIFF_SRC, dx);
  SmallWorkSerial serial(conv_macs(s));
  e.run();
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             const Conv2dParams& p) {
  ConvShape s = conv_shape(x, dw.shape(), dy.shape());
  bool has_b = db.defined();
  if (x.dtype() == DType::kFloat64) {
    const double* px = x.data<double>();
    const double* pdy = dy.data<double>();
    double* pdw = dw.data<double>();
    std::memset(pdw, 0, dw.nbytes());
    conv_for_each_mac(s, p,
                      [&](int64_t xi, int64_t wi, int64_t yi) { pdw[wi] += pdy[yi] * px[xi]; });
    if (has_b) {
      double* pdb = db.data<double>();
      std::memset(pdb, 0, db.nbytes());
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t k = 0; k < s.k; ++k)
          for (int64_t i = 0; i < s.p * s.q; ++i) pdb[k] += pdy[(n * s.k + k) * s.p * s.q + i];
    }
    return;
  }
  const int lx = operand_bits(x), ly = operand_bits(dy);
  if (!lx && !ly && use_direct(x.shape(), dw.shape(), p))
    return conv2d_direct_backward_weights(x, dy, dw, db, p);
  const bool bf16 = conv_bf16(s.c, p) || x.dtype() == DType::kBFloat16;
  const ops::ConvAlgorithm setting = ops::conv_algorithm();
  const DnnlKey key = conv_key(2, s, p, has_b, Act::kNone, conv_variant(bf16, lx, ly, setting));
  DnnlOp& e = dnnl_cached(key, [&](DnnlOp& op) {
    using namespace dnnl;
    ConvMds m = conv_mds(s, p, bf16);
    const auto hint = conv_fwd_pd(m, has_b, requested_algorithm(s, p, bf16, setting));
    auto pd = with_fallback(backward_algorithm(hint), [&](algorithm a) {
      auto d = has_b ? convolution_backward_weights::desc(a, m.x_any, m.w_any_out, m.b,
                                                          m.y_any_in, m.strides, m.dilates,
                                                          m.pad_l, m.pad_r)
                     : convolution_backward_weights::desc(a, m.x_any, m.w_any_out, m.y_any_in,
                                                          m.strides, m.dilates, m.pad_l, m.pad_r);
      return convolution_backward_weights::primitive_desc(d, dnnl_engine(), hint);
    });
    op.prim = convolution_backward_weights(pd);
    op.add_staged_arg(DNNL_ARG_SRC, user_md(x), pd.src_desc(), true);
    op.add_staged_arg(DNNL_ARG_DIFF_DST, user_md(dy), pd.diff_dst_desc(), true);
    op.add_staged_arg(DNNL_ARG_DIFF_WEIGHTS, m.w, pd.diff_weights_desc(), false);
    if (has_b) op.add_arg(DNNL_ARG_DIFF_BIAS, m.b);
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_DIFF_DST, dy);
  e.bind(DNNL_ARG_DIFF_WEIGHTS, dw);
  if (has_b) e.bind(DNNL_ARG_DIFF_BIAS, db);
  SmallWorkSerial serial(conv_macs(s));
  e.run();
}

void channel_bias_add_inplace(Tensor& y, const Tensor& b) {
  HPCNET_CHECK(y.is_contiguous(), "channel_bias_add: y must be row-major");
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  dispatch_float(y.dtype(), "channel_bias_add", [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T* pb = b.data<T>();
#pragma omp parallel for schedule(static) if (y.numel() > (1 << 15))
    for (int64_t nc = 0; nc < N * C; ++nc) {
      const T v = pb[nc % C];
      T* row = py + nc * HW;
      for (int64_t i = 0; i < HW; ++i) row[i] += v;
    }
  });
}

void channel_bias_backward(const Tensor& dy, Tensor& db) {
  HPCNET_CHECK(dy.is_contiguous(), "channel_bias_backward: dy must be row-major");
  const int64_t N = dy.size(0), C = dy.size(1), HW = dy.size(2) * dy.size(3);
  dispatch_float(dy.dtype(), "channel_bias_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    T* pdb = db.data<T>();
    // One channel per task, summed in double in a fixed order (thread-count independent).
#pragma omp parallel for schedule(static) if (dy.numel() > (1 << 15))
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = pdy + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) acc += static_cast<double>(row[i]);
      }
      pdb[c] = static_cast<T>(acc);
    }
  });
}

}  // namespace hpcnet::cpu
