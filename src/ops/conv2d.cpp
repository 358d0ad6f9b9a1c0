// conv2d: the dispatching kernels and the differentiable F::conv2d / F::conv2d_relu, with the
// backward beside the forward:  dx = conv_transpose(dy, w),  dw = corr(x, dy),  db = sum(dy).
// With a fused ReLU the node first masks dy by (y > 0).
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_table.h"

namespace hpcnet {
namespace ops {

HPCNET_DEFINE_OP(conv2d)

namespace {
// 2 * N * K * P * Q * C * R * S multiply-adds (the same for the forward and both backwards).
double conv_flops(const Tensor& w, const Tensor& y) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.numel() / w.size(0));
}

void check_conv(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  HPCNET_CHECK(x.dim() == 4,
               std::string(op) + ": input must be (N, C, H, W), got " + shape_str(x.shape()));
  HPCNET_CHECK(w.dim() == 4 && w.size(1) == x.size(1),
               std::string(op) + ": weight " + shape_str(w.shape()) + " does not fit input " +
                   shape_str(x.shape()));
  // A bfloat16 input (CPU --precision bf16, converted by the node) runs with float32 weights.
  const DType want = x.dtype() == DType::kBFloat16 ? DType::kFloat32 : x.dtype();
  detail::check_dtype(op, w, want, "weight");
  if (b.defined()) {
    detail::check_shape(op, b, {w.size(0)}, "bias");
    detail::check_dtype(op, b, want, "bias");
  }
  detail::check_same_device_dense(op, x.device(), {&x});  // x may be blocked
  detail::check_same_device(op, x.device(), {&w, &b});
}
}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p, bool relu) {
  check_conv("conv2d", x, w, b);
  detail::check_shape(
      "conv2d", y,
      {x.size(0), w.size(0), conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h),
       conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w)},
      "output");
  HPCNET_DISPATCH_FLOPS(conv_flops(w, y), x.device(), conv2d_forward, x, w, b, y, p, relu);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p) {
  detail::check_same_device_dense("conv2d_backward_data", dy.device(), {&dy});
  detail::check_same_device_dense("conv2d_backward_data", dy.device(), {&dx});
  detail::check_same_device("conv2d_backward_data", dy.device(), {&w});
  HPCNET_DISPATCH_FLOPS(conv_flops(w, dy), dy.device(), conv2d_backward_data, dy, w, dx, p);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             const Conv2dParams& p) {
  detail::check_same_device_dense("conv2d_backward_weights", x.device(), {&x});
  detail::check_same_device_dense("conv2d_backward_weights", x.device(), {&dy});
  detail::check_same_device("conv2d_backward_weights", x.device(), {&dw, &db});
  HPCNET_DISPATCH_FLOPS(conv_flops(dw, dy), x.device(), conv2d_backward_weights, x, dy, dw, db, p);
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
    if (bf16) dy = cpu::to_bf16(dy);  // once, for both backward kernels
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
                   int64_t padding, bool relu) {
  HPCNET_CHECK(stride >= 1 && padding >= 0, "conv2d: stride must be >= 1 and padding >= 0");
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();
  Tensor w = w_in.contiguous(), b = b_in.defined() ? b_in.contiguous() : b_in;
  ops::Conv2dParams p{stride, stride, padding, padding};
  HPCNET_CHECK(x.dim() == 4 && w.dim() == 4, "conv2d: input and weight must be 4-d");
  int64_t oh = ops::conv_out_size(x.size(2), w.size(2), stride, padding);
  int64_t ow = ops::conv_out_size(x.size(3), w.size(3), stride, padding);
  HPCNET_CHECK(oh > 0 && ow > 0, "conv2d: kernel " + shape_str(w.shape()) +
                                     " is larger than the padded input " + shape_str(x.shape()));
  // CPU convolutions that run on oneDNN's blocked kernels leave their output blocked, so the
  // next convolution (through batch norm and relu) reads it without a reorder.
  const bool blocked = x.device().is_cpu() && cpu::conv2d_wants_blocked(x, w.shape(), p);
  Tensor y = Tensor::empty_layout({x.size(0), w.size(0), oh, ow}, x.dtype(), x.device(),
                                  blocked ? Layout::kBlocked16 : Layout::kStrided);
  // bfloat16 convolutions read a bfloat16 copy of x, made once and kept for the weight gradient.
  const bool bf16 = x.device().is_cpu() && cpu::conv2d_uses_bf16(x, w.shape(), p);
  Tensor xk = bf16 ? cpu::to_bf16(x) : x;
  ops::conv2d_forward(xk, w, b, y, p, relu);
  if (any_requires_grad({&x_in, &w_in, &b_in})) {
    auto node = std::make_shared<Conv2dNode>();
    node->x = xk;
    node->bf16 = bf16;
    node->w = w;
    node->has_bias = b.defined();
    node->relu = relu;
    node->p = p;
    if (relu) node->y = y;
    record(node, {&x_in, &w_in, &b_in}, y);
  }
  return y;
}

}  // namespace

Tensor F::conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                 int64_t padding) {
  return conv2d_impl(x, w, b, stride, padding, false);
}

Tensor F::conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                      int64_t padding) {
  return conv2d_impl(x, w, b, stride, padding, true);
}

}  // namespace hpcnet
