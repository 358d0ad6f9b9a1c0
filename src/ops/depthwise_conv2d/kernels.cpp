// The kernel API of depthwise_conv2d_forward / _backward_data / _backward_weights (declared in
// src/ops/kernels.inc): checks, then dispatch to src/ops/depthwise_conv2d/cpu.cpp or cuda.cu.
// The kernel layer: no autograd (F::depthwise_conv2d is in functional.cpp beside it).
#include <string>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {
namespace {

// x (N, C, H, W), w (C, 1, R, S), y (N, C, P, Q) of one dtype, on one device, row-major.
void check_depthwise(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                     const Tensor& y, const Conv2dParams& p) {
  HPCNET_CHECK(x.dim() == 4 && w.dim() == 4 && w.size(0) == x.size(1) && w.size(1) == 1,
               std::string(op) + ": weight " + shape_str(w.shape()) + " does not fit input " +
                   shape_str(x.shape()));
  detail::check_shape(
      op, y,
      {x.size(0), x.size(1), conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h, p.dil_h),
       conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w, p.dil_w)},
      "output");
  detail::check_dtype(op, w, x.dtype(), "weight");
  detail::check_dtype(op, y, x.dtype(), "output");
  if (b.defined()) {
    detail::check_shape(op, b, {x.size(1)}, "bias");
    detail::check_dtype(op, b, x.dtype(), "bias");
  }
  detail::check_same_device(op, x.device(), {&x, &w, &b, &y});
}

double flops(const Tensor& w, const Tensor& y) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.size(2) * w.size(3));
}

}  // namespace

void depthwise_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                              const Conv2dParams& p) {
  check_depthwise(op_name::depthwise_conv2d, x, w, b, y, p);
  if (y.numel() == 0) return;
  HPCNET_DISPATCH_FLOPS(flops(w, y), x.device(), depthwise_conv2d_forward, x, w, b, y, p);
}

void depthwise_conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx,
                                    const Conv2dParams& p) {
  check_depthwise("depthwise_conv2d_backward_data", dx, w, Tensor(), dy, p);
  if (dx.numel() == 0) return;
  HPCNET_DISPATCH_FLOPS(flops(w, dy), dy.device(), depthwise_conv2d_backward_data, dy, w, dx, p);
}

void depthwise_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                                       const Conv2dParams& p) {
  check_depthwise("depthwise_conv2d_backward_weights", x, dw, db, dy, p);
  HPCNET_DISPATCH_FLOPS(flops(dw, dy), x.device(), depthwise_conv2d_backward_weights, x, dy, dw, db,
                        p);
}

}  // namespace hpcnet::ops
