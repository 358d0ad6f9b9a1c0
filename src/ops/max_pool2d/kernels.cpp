// The kernel API of max_pool2d_forward / _backward (declared in src/ops/kernels.inc): each function
// checks its arguments and dispatches on the device to src/ops/max_pool2d/cpu.cpp or cuda.cu. The
// kernel layer: no autograd, no tape (the differentiable F:: functions are in functional.cpp beside
// it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor* workspace, const Pool2dParams& p) {
  detail::check_same_device(op_name::max_pool2d, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), max_pool2d_forward, x, y, workspace, p);
}

void max_pool2d_backward(const Tensor& dy, const Tensor& workspace, Tensor& dx,
                         const Pool2dParams& p) {
  detail::check_same_device("max_pool2d_backward", dy.device(), {&dy, &dx});
  HPCNET_DISPATCH(dy.device(), max_pool2d_backward, dy, workspace, dx, p);
}

}  // namespace hpcnet::ops
