// The kernel API of conv2d (forward, backward data and weights, conv2d_into, the output layout) and
// the channel bias of conv_transpose2d (declared in src/ops/kernels.inc): each function checks its
// arguments and dispatches on the device to src/ops/conv2d/cpu.cpp or cuda.cu. The kernel layer: no
// autograd, no tape (the differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/conv2d/checks.h"
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p, Act act) {
  check_conv(op_name::conv2d, x, w, b);
  detail::check_shape(
      op_name::conv2d, y,
      {x.size(0), w.size(0), conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h, p.dil_h),
       conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w, p.dil_w)},
      "output");
  if (y.numel() == 0) return;  // a batch of 0: nothing to compute (cuDNN rejects empty shapes)
  HPCNET_DISPATCH_FLOPS(conv_flops(w, y), x.device(), conv2d_forward, x, w, b, y, p, act);
}

Layout conv2d_output_layout(const Tensor& x, const Shape& w, const Conv2dParams& p) {
  const bool blocked = x.device().is_cpu() && cpu::conv2d_wants_blocked(x, w, p);
  return blocked ? Layout::kBlocked16 : Layout::kStrided;
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p) {
  detail::check_same_device_dense("conv2d_backward_data", dy.device(), {&dy});
  detail::check_same_device_dense("conv2d_backward_data", dy.device(), {&dx});
  detail::check_same_device("conv2d_backward_data", dy.device(), {&w});
  if (dx.numel() == 0) return;  // a batch of 0 (conv_transpose2d's forward too)
  HPCNET_DISPATCH_FLOPS(conv_flops(w, dy), dy.device(), conv2d_backward_data, dy, w, dx, p);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             const Conv2dParams& p) {
  detail::check_same_device_dense("conv2d_backward_weights", x.device(), {&x});
  detail::check_same_device_dense("conv2d_backward_weights", x.device(), {&dy});
  detail::check_same_device("conv2d_backward_weights", x.device(), {&dw, &db});
  HPCNET_DISPATCH_FLOPS(conv_flops(dw, dy), x.device(), conv2d_backward_weights, x, dy, dw, db, p);
}

bool conv2d_uses_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p) {
  if (x.device().is_cpu()) return cpu::conv2d_uses_bf16(x, w, p);
  return conv_precision() == Precision::kBFloat16 && x.dtype() == DType::kFloat32;
}

void to_bfloat16(const Tensor& x, Tensor& y) {
  HPCNET_CHECK(x.dim() == 4, "to_bf16: x must be (N, C, H, W), got " + shape_str(x.shape()));
  detail::check_dtype("to_bf16", x, DType::kFloat32, "x");
  detail::check_dtype("to_bf16", y, DType::kBFloat16, "y");
  detail::check_shape("to_bf16", y, x.shape(), "y");
  detail::check_same_device_dense("to_bf16", x.device(), {&x, &y});
  if (x.numel() == 0) return;
  HPCNET_DISPATCH(x.device(), to_bfloat16, x, y);
}

Tensor to_bf16(const Tensor& t) {
  if (t.dtype() == DType::kBFloat16) return t;
  Tensor out = Tensor::empty_layout(t.shape(), DType::kBFloat16, t.device(), t.layout());
  to_bfloat16(t, out);
  return out;
}

void channel_bias_add_inplace(Tensor& y, const Tensor& b) {
  HPCNET_CHECK(y.dim() == 4, "channel_bias_add: y must be (N, C, H, W)");
  detail::check_shape("channel_bias_add", b, {y.size(1)}, "bias");
  detail::check_dtype("channel_bias_add", b, y.dtype(), "bias");
  detail::check_same_device("channel_bias_add", y.device(), {&y, &b});
  HPCNET_DISPATCH(y.device(), channel_bias_add_inplace, y, b);
}

void channel_bias_backward(const Tensor& dy, Tensor& db) {
  HPCNET_CHECK(dy.dim() == 4, "channel_bias_backward: dy must be (N, C, H, W)");
  detail::check_shape("channel_bias_backward", db, {dy.size(1)}, "db");
  detail::check_dtype("channel_bias_backward", db, dy.dtype(), "db");
  detail::check_same_device("channel_bias_backward", dy.device(), {&dy, &db});
  HPCNET_DISPATCH(dy.device(), channel_bias_backward, dy, db);
}

}  // namespace hpcnet::ops
