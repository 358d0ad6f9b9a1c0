// The kernel API of gelu_forward / _backward (declared in src/ops/kernels.inc): checks, then
// dispatch to src/ops/gelu/cpu.cpp or cuda.cu. The kernel layer: no autograd (F::gelu is in
// functional.cpp beside it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void gelu_forward(const Tensor& x, Tensor& y, bool tanh_approx) {
  detail::check_same_device_dense(op_name::gelu, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), gelu_forward, x, y, tanh_approx);
}
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, bool tanh_approx) {
  detail::check_same_device_dense("gelu_backward", dy.device(), {&dy, &x, &dx});
  HPCNET_DISPATCH(dy.device(), gelu_backward, dy, x, dx, tanh_approx);
}

}  // namespace hpcnet::ops
