// The kernel API of linear_forward / _backward_data / _backward_weights (declared in
// src/ops/kernels.inc): each function checks its arguments and dispatches on the device to
// src/ops/linear/cpu.cpp or cuda.cu. The kernel layer: no autograd, no tape (the differentiable F::
// functions are in functional.cpp beside it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, bool relu) {
  const char* op = op_name::linear;
  HPCNET_CHECK(x.dim() == 2 && w.dim() == 2 && w.size(1) == x.size(1),
               std::string(op) + ": weight " + shape_str(w.shape()) + " does not fit input " +
                   shape_str(x.shape()));
  detail::check_dtype(op, w, x.dtype(), "weight");
  if (b.defined()) {
    detail::check_shape(op, b, {w.size(0)}, "bias");
    detail::check_dtype(op, b, x.dtype(), "bias");
  }
  detail::check_shape(op, y, {x.size(0), w.size(0)}, "output");
  detail::check_same_device(op, x.device(), {&x, &w, &b, &y});
  if (y.numel() == 0) return;  // a batch of 0: nothing to compute
  HPCNET_DISPATCH_FLOPS(2.0 * x.size(0) * w.numel(), x.device(), linear_forward, x, w, b, y, relu);
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  detail::check_same_device("linear_backward_data", dy.device(), {&dy, &w, &dx});
  HPCNET_DISPATCH_FLOPS(2.0 * dy.size(0) * w.numel(), dy.device(), linear_backward_data, dy, w, dx);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  detail::check_same_device("linear_backward_weights", x.device(), {&x, &dy, &dw, &db});
  HPCNET_DISPATCH_FLOPS(2.0 * x.size(0) * dw.numel(), x.device(), linear_backward_weights, x, dy, dw, db);
}

}  // namespace hpcnet::ops
