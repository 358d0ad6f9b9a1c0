// conv2d: the differentiable F::conv2d / F::conv2d_relu, with the
// backward beside the forward:  dx = conv_transpose(dy, w),  dw = corr(x, dy),  db = sum(dy).
// With a fused ReLU the node first masks dy by (y > 0).
#include "hpcnet/functional.h"
#include "src/ops/conv2d/checks.h"
#include "src/ops/conv2d/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace ops {


void conv2d_into(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p, Act act,
                 Tensor& out) {
  HPCNET_CHECK(!any_requires_grad({&x, &w, &b}),
               "conv2d_into: inference only, but an input requires a gradient");
  detail::check_same_device_dense("conv2d_into", x.device(), {&out});
  if (x.device().is_cuda() && conv2d_uses_bf16(x, w.shape(), p))
    return conv2d_forward(to_bf16(x), w, b, out, p, act);
  Conv2dParams q = p;
  q.bf16 = x.device().is_cpu() && cpu::conv2d_inference_bf16(x, w.shape(), p);
  conv2d_forward(x, w, b, out, q, act);
}

}  // namespace ops

namespace {

struct Conv2dNode : Node {
  Tensor x, w, y;  // y kept only with the fused ReLU; x is the bfloat16 copy when bf16 is on
  bool has_bias = false, relu = false, bf16 = false;
  ops::Conv2dParams p;
  const char* name() const override { return relu ? "Conv2dReluBackward" : "Conv2dBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    // The kernels take either layout for each tensor; dx comes back in x's layout.
    Tensor dy = relu ? ops::as_layout(grad_out, y)
                     : (grad_out.is_dense() ? grad_out : grad_out.contiguous());
    if (relu) {
      Tensor masked = Tensor::empty_layout(dy.shape(), dy.dtype(), dy.device(), dy.layout());
      ops::relu_backward(dy, y, masked);
      dy = masked;
    }
    if (bf16) dy = ops::to_bf16(dy);  // once, for both backward kernels
    Tensor dx, dw, db;
    if (edges[0].active()) {
      // x's bfloat16 copy keeps its shape and layout; the gradient is float32.
      dx = Tensor::empty_layout(x.shape(), bf16 ? DType::kFloat32 : x.dtype(), x.device(),
                                x.layout());
      ops::conv2d_backward_data(dy, w, dx, p);
    }
    if (edges[1].active() || (has_bias && edges[2].active())) {
      dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      if (has_bias) db = Tensor::empty({w.size(0)}, w.dtype(), w.device());
      ops::conv2d_backward_weights(x, dy, dw, db, p);
    }
    return {dx, edges[1].active() ? dw : Tensor(), has_bias && edges[2].active() ? db : Tensor()};
  }
  void release() override { x = w = y = Tensor(); }
};

Tensor conv2d_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, int64_t stride,
                   int64_t padding, int64_t dilation, ops::Act act) {
  HPCNET_CHECK(x_in.defined() && w_in.defined(), std::string("conv2d: the ") +
                                                     (x_in.defined() ? "weight" : "input") +
                                                     " is an undefined tensor");
  HPCNET_CHECK(stride >= 1 && padding >= 0 && dilation >= 1,
               "conv2d: need stride >= 1, padding >= 0 and dilation >= 1, got stride " +
                   std::to_string(stride) + ", padding " + std::to_string(padding) + ", dilation " +
                   std::to_string(dilation));
  HPCNET_CHECK(x_in.dim() == 4 && w_in.dim() == 4,
               "conv2d: input must be (N, C, H, W) and weight (K, C, R, S), got " +
                   shape_str(x_in.shape()) + " and " + shape_str(w_in.shape()));
  HPCNET_CHECK(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
               std::string("conv2d: input must be float32 or float64, got ") +
                   dtype_name(x_in.dtype()) + " " + shape_str(x_in.shape()));
  HPCNET_CHECK(x_in.size(1) >= 1, "conv2d: input " + shape_str(x_in.shape()) + " has no channels");
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();
  Tensor w = w_in.contiguous(), b = b_in.defined() ? b_in.contiguous() : b_in;
  ops::check_conv(op_name::conv2d, x, w, b);  // channels, dtypes and bias, before allocating
  ops::Conv2dParams p{stride, stride, padding, padding, dilation, dilation};
  // Inference (no gradient recorded) under --precision bf16: every float32 convolution computes
  // in bfloat16, x converted inside the kernel in the pass that reorders it. Recorded ones keep
  // the training rule (conv2d_uses_bf16) and a bfloat16 copy of x for the weight gradient.
  const bool recording = any_requires_grad({&x_in, &w_in, &b_in});
  p.bf16 = !recording && x.device().is_cpu() && cpu::conv2d_inference_bf16(x, w.shape(), p);
  int64_t oh = ops::conv_out_size(x.size(2), w.size(2), stride, padding, dilation);
  int64_t ow = ops::conv_out_size(x.size(3), w.size(3), stride, padding, dilation);
  // (conv_out_size truncates towards 0, so a too-large kernel with stride > 1 still gives 1.)
  const bool fits = x.size(2) + 2 * padding >= dilation * (w.size(2) - 1) + 1 &&
                    x.size(3) + 2 * padding >= dilation * (w.size(3) - 1) + 1;
  HPCNET_CHECK(fits && oh > 0 && ow > 0, "conv2d: kernel " + shape_str(w.shape()) +
                                             " is larger than the padded input " +
                                             shape_str(x.shape()));
  // CPU convolutions that run on oneDNN's blocked kernels leave their output blocked, so the
  // next convolution (through batch norm and relu) reads it without a reorder.
  Tensor y = Tensor::empty_layout({x.size(0), w.size(0), oh, ow}, x.dtype(), x.device(),
                                  ops::conv2d_output_layout(x, w.shape(), p));
  // bfloat16 convolutions read a bfloat16 copy of x, made once and kept for the weight gradient.
  // On CUDA inference takes that path too (the CPU's converts inside the kernel, p.bf16).
  const bool bf16 = (recording || x.device().is_cuda()) && ops::conv2d_uses_bf16(x, w.shape(), p);
  Tensor xk = bf16 ? ops::to_bf16(x) : x;
  ops::conv2d_forward(xk, w, b, y, p, act);
  const bool relu = act == ops::Act::kRelu;
  if (recording) {
    HPCNET_CHECK(act != ops::Act::kSilu, "conv2d_silu: no backward (F::conv2d_silu unfuses)");
    auto node = std::make_shared<Conv2dNode>();
    node->x = xk;
    node->bf16 = bf16;
    node->w = w;
    node->has_bias = b.defined();
    node->relu = relu;
    node->p = p;
    if (relu) node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    record(node, {&x_in, &w_in, &b_in}, y);
  }
  trace::add(op_record::conv2d, {x_in, w_in, b_in}, y,
             {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {op_name::relu, relu}});
  return y;
}

// conv_transpose2d = conv2d's input gradient run forward (x in the role of dy):
//   y = conv2d_backward_data(x, w) + b;  dx = conv2d(dy, w);  dw = conv2d_backward_weights(dy, x)
// (the forward convolution's input is dy, its output gradient x);  db = sum of dy per channel.
struct ConvTranspose2dNode : Node {
  Tensor x, w;
  bool has_bias = false;
  ops::Conv2dParams p;
  const char* name() const override { return "ConvTranspose2dBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor dy = grad_out.is_dense() ? grad_out : grad_out.contiguous();  // either layout
    Tensor dx, dw, db;
    if (edges[0].active()) {
      dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      ops::conv2d_forward(dy, w, Tensor(), dx, p);
    }
    if (edges[1].active()) {
      dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      Tensor none;
      ops::conv2d_backward_weights(dy, x, dw, none, p);
    }
    if (has_bias && edges[2].active()) {
      db = Tensor::empty({w.size(1)}, w.dtype(), w.device());
      ops::channel_bias_backward(dy.to_layout(Layout::kStrided), db);
    }
    return {dx, dw, db};
  }
  void release() override { x = w = Tensor(); }
};

}  // namespace

Tensor F::conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                           int64_t stride, int64_t padding, int64_t output_padding,
                           int64_t dilation) {
  const std::string op = op_name::conv_transpose2d;
  HPCNET_CHECK(x_in.defined() && w_in.defined(),
               op + ": the " + (x_in.defined() ? "weight" : "input") + " is an undefined tensor");
  HPCNET_CHECK(stride >= 1 && padding >= 0 && dilation >= 1 && output_padding >= 0,
               op + ": stride and dilation must be >= 1, padding and output_padding >= 0, got " +
                   "stride " + std::to_string(stride) + ", padding " + std::to_string(padding) +
                   ", output_padding " + std::to_string(output_padding) + ", dilation " +
                   std::to_string(dilation));
  HPCNET_CHECK(output_padding < stride, op + ": output_padding " + std::to_string(output_padding) +
                                            " must be smaller than stride " +
                                            std::to_string(stride));
  HPCNET_CHECK(x_in.dim() == 4,
               op + ": input must be (N, C, H, W), got " + shape_str(x_in.shape()));
  HPCNET_CHECK(w_in.dim() == 4 && w_in.size(0) == x_in.size(1),
               op + ": weight " + shape_str(w_in.shape()) +
                   " must be (in_channels, out_channels, kH, kW) for input " +
                   shape_str(x_in.shape()));
  HPCNET_CHECK(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
               op + ": input must be float32 or float64, got " + dtype_name(x_in.dtype()) + " " +
                   shape_str(x_in.shape()));
  HPCNET_CHECK(x_in.size(1) >= 1, op + ": input " + shape_str(x_in.shape()) + " has no channels");
  ops::detail::check_dtype(op.c_str(), w_in, x_in.dtype(), "weight");
  const int64_t K = w_in.size(1);
  if (b_in.defined()) {
    ops::detail::check_shape(op.c_str(), b_in, {K}, "bias");
    ops::detail::check_dtype(op.c_str(), b_in, x_in.dtype(), "bias");
  }
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();
  Tensor w = w_in.contiguous(), b = b_in.defined() ? b_in.contiguous() : b_in;
  ops::Conv2dParams p{stride, stride, padding, padding, dilation, dilation};
  const int64_t oh =
      (x.size(2) - 1) * stride - 2 * padding + dilation * (w.size(2) - 1) + output_padding + 1;
  const int64_t ow =
      (x.size(3) - 1) * stride - 2 * padding + dilation * (w.size(3) - 1) + output_padding + 1;
  HPCNET_CHECK(oh > 0 && ow > 0, op + ": padding " + std::to_string(padding) +
                                     " leaves no output for input " + shape_str(x.shape()) +
                                     " and weight " + shape_str(w.shape()));
  Tensor y = Tensor::empty({x.size(0), K, oh, ow}, x.dtype(), x.device());
  ops::conv2d_backward_data(x, w, y, p);
  if (b.defined()) ops::channel_bias_add_inplace(y, b);
  if (any_requires_grad({&x_in, &w_in, &b_in})) {
    auto node = std::make_shared<ConvTranspose2dNode>();
    node->x = x;
    node->w = w;
    node->has_bias = b.defined();
    node->p = p;
    record(node, {&x_in, &w_in, &b_in}, y);
  }
  trace::add(op_record::conv_transpose2d, {x_in, w_in, b_in}, y,
             {{"stride", stride},
              {"padding", padding},
              {"output_padding", output_padding},
              {"dilation", dilation}});
  return y;
}

Tensor F::conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                 int64_t dilation) {
  return conv2d_impl(x, w, b, stride, padding, dilation, ops::Act::kNone);
}

Tensor F::conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                      int64_t padding, int64_t dilation) {
  return conv2d_impl(x, w, b, stride, padding, dilation, ops::Act::kRelu);
}

Tensor F::conv2d_silu(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                      int64_t padding, int64_t dilation) {
  // The backward of SiLU needs its input, which the fused kernel never writes: under autograd
  // (and when tracing for export, which maps conv2d and silu one by one) it runs unfused.
  if (any_requires_grad({&x, &w, &b}) || trace::g_recorder != nullptr)
    return F::silu(conv2d_impl(x, w, b, stride, padding, dilation, ops::Act::kNone));
  return conv2d_impl(x, w, b, stride, padding, dilation, ops::Act::kSilu);
}

}  // namespace hpcnet
