// The kernel API of relu, silu, sigmoid, mul, add, scale and the reductions sum / mean (declared in
// src/ops/kernels.inc): each function checks its arguments and dispatches on the device to
// src/ops/elementwise/cpu.cpp or cuda.cu. The kernel layer: no autograd, no tape (the
// differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void relu_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device_dense(op_name::relu, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), relu_forward, x, y);
}
void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  detail::check_same_device_dense("relu_backward", dy.device(), {&dy, &y, &dx});
  HPCNET_DISPATCH(dy.device(), relu_backward, dy, y, dx);
}
void silu_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device_dense(op_name::silu, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), silu_forward, x, y);
}
void silu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  detail::check_same_device_dense("silu_backward", dy.device(), {&dy, &x, &dx});
  HPCNET_DISPATCH(dy.device(), silu_backward, dy, x, dx);
}
void sigmoid_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device_dense(op_name::sigmoid, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), sigmoid_forward, x, y);
}
void sigmoid_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  detail::check_same_device_dense("sigmoid_backward", dy.device(), {&dy, &y, &dx});
  HPCNET_DISPATCH(dy.device(), sigmoid_backward, dy, y, dx);
}
void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  detail::check_shape(op_name::mul, b, a.shape(), "other");
  detail::check_dtype(op_name::mul, b, a.dtype(), "other");
  detail::check_same_device(op_name::mul, a.device(), {&a, &b, &out});
  HPCNET_DISPATCH(a.device(), mul, a, b, out);
}
void add(const Tensor& a, const Tensor& b, Tensor& out) {
  detail::check_shape(op_name::add, b, a.shape(), "other");
  detail::check_dtype(op_name::add, b, a.dtype(), "other");
  detail::check_same_device_dense(op_name::add, a.device(), {&a, &b, &out});
  HPCNET_DISPATCH(a.device(), add, a, b, out);
}
void add_inplace(Tensor& a, const Tensor& b_in) {
  detail::check_shape("add_", b_in, a.shape(), "other");
  detail::check_dtype("add_", b_in, a.dtype(), "other");
  Tensor b = as_layout(b_in, a);  // gradients of one tensor may arrive in either layout
  detail::check_same_device_dense("add_", a.device(), {&a, &b});
  HPCNET_DISPATCH(a.device(), add_inplace, a, b);
}
void scale(const Tensor& x, double s, Tensor& out) {
  detail::check_same_device("scale", x.device(), {&x, &out});
  HPCNET_DISPATCH(x.device(), scale, x, s, out);
}
void sum_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device(op_name::sum, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), sum_forward, x, y);
}
void mean_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device(op_name::mean, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), mean_forward, x, y);
}
void fill_like_backward(const Tensor& dy, double factor, Tensor& dx) {
  detail::check_same_device("fill_like_backward", dx.device(), {&dy, &dx});
  HPCNET_DISPATCH(dx.device(), fill_like_backward, dy, factor, dx);
}

}  // namespace hpcnet::ops
