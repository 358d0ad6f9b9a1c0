// The kernel API of global_avg_pool2d, subsample_pad, mask_scale (dropout), upsample_nearest2d and
// upsample_bilinear2d (declared in src/ops/kernels.inc): each function checks its arguments and
// dispatches on the device to src/ops/resample/cpu.cpp or cuda.cu. The kernel layer: no autograd,
// no tape (the differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void global_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device(op_name::global_avg_pool2d, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), global_avg_pool2d_forward, x, y);
}
void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) {
  detail::check_same_device("global_avg_pool2d_backward", dy.device(), {&dy, &dx});
  HPCNET_DISPATCH(dy.device(), global_avg_pool2d_backward, dy, dx);
}
void subsample_pad_forward(const Tensor& x, Tensor& y, int64_t stride, int64_t pad) {
  detail::check_same_device(op_name::subsample_pad, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), subsample_pad_forward, x, y, stride, pad);
}
void subsample_pad_backward(const Tensor& dy, Tensor& dx, int64_t stride, int64_t pad) {
  detail::check_same_device("subsample_pad_backward", dy.device(), {&dy, &dx});
  HPCNET_DISPATCH(dy.device(), subsample_pad_backward, dy, dx, stride, pad);
}
void mask_scale(const Tensor& x, const Tensor& mask, double s, Tensor& out) {
  detail::check_same_device(op_name::dropout, x.device(), {&x, &mask, &out});
  detail::check_dtype(op_name::dropout, mask, DType::kUInt8, "mask");
  HPCNET_DISPATCH(x.device(), mask_scale, x, mask, s, out);
}
void upsample_nearest2d_forward(const Tensor& x, Tensor& y, int64_t scale) {
  HPCNET_CHECK(x.dim() == 4 && scale >= 1, "upsample_nearest2d: need (N, C, H, W) and scale >= 1");
  detail::check_shape(op_name::upsample_nearest2d, y,
                      {x.size(0), x.size(1), x.size(2) * scale, x.size(3) * scale}, "output");
  detail::check_dtype(op_name::upsample_nearest2d, y, x.dtype(), "output");
  detail::check_same_device_dense(op_name::upsample_nearest2d, x.device(), {&x, &y});  // (CPU) blocked too
  HPCNET_DISPATCH(x.device(), upsample_nearest2d_forward, x, y, scale);
}
void upsample_nearest2d_backward(const Tensor& dy, Tensor& dx, int64_t scale) {
  HPCNET_CHECK(dx.dim() == 4 && scale >= 1,
               "upsample_nearest2d_backward: need (N, C, H, W) and scale >= 1");
  detail::check_shape("upsample_nearest2d_backward", dy,
                      {dx.size(0), dx.size(1), dx.size(2) * scale, dx.size(3) * scale}, "dy");
  detail::check_dtype("upsample_nearest2d_backward", dy, dx.dtype(), "dy");
  detail::check_same_device_dense("upsample_nearest2d_backward", dy.device(), {&dy, &dx});
  HPCNET_DISPATCH(dy.device(), upsample_nearest2d_backward, dy, dx, scale);
}

void upsample_bilinear2d_forward(const Tensor& x, Tensor& y, bool align_corners) {
  HPCNET_CHECK(x.dim() == 4 && y.dim() == 4 && y.size(0) == x.size(0) && y.size(1) == x.size(1),
               "upsample_bilinear2d: need x (N, C, H, W) and y (N, C, OH, OW)");
  detail::check_dtype(op_name::upsample_bilinear2d, y, x.dtype(), "output");
  detail::check_same_device(op_name::upsample_bilinear2d, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), upsample_bilinear2d_forward, x, y, align_corners);
}
void upsample_bilinear2d_backward(const Tensor& dy, Tensor& dx, bool align_corners) {
  HPCNET_CHECK(
      dx.dim() == 4 && dy.dim() == 4 && dy.size(0) == dx.size(0) && dy.size(1) == dx.size(1),
      "upsample_bilinear2d_backward: need dy (N, C, OH, OW) and dx (N, C, H, W)");
  detail::check_dtype("upsample_bilinear2d_backward", dy, dx.dtype(), "dy");
  detail::check_same_device("upsample_bilinear2d_backward", dy.device(), {&dy, &dx});
  HPCNET_DISPATCH(dy.device(), upsample_bilinear2d_backward, dy, dx, align_corners);
}

}  // namespace hpcnet::ops
