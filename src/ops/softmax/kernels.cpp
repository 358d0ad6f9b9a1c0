// The kernel API of softmax_forward / _backward (declared in src/ops/kernels.inc): checks, then
// dispatch to src/ops/softmax/cpu.cpp or cuda.cu. The kernel layer: no autograd (F::softmax is
// in functional.cpp beside it).
#include <string>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {

namespace {
void check_dim(const char* op, const Tensor& x, int64_t dim) {
  HPCNET_CHECK(dim >= 0 && dim < x.dim(), std::string(op) + ": dim " + std::to_string(dim) +
                                              " is not a dim of " + shape_str(x.shape()));
}
}  // namespace

void softmax_forward(const Tensor& x, Tensor& y, int64_t dim) {
  check_dim(op_name::softmax, x, dim);
  detail::check_shape(op_name::softmax, y, x.shape(), "output");
  detail::check_same_device(op_name::softmax, x.device(), {&x, &y});
  HPCNET_DISPATCH_FLOPS(5.0 * x.numel(), x.device(), softmax_forward, x, y, dim);
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t dim) {
  check_dim("softmax_backward", y, dim);
  detail::check_shape("softmax_backward", dy, y.shape(), "output gradient");
  detail::check_shape("softmax_backward", dx, y.shape(), "input gradient");
  detail::check_same_device("softmax_backward", y.device(), {&dy, &y, &dx});
  HPCNET_DISPATCH_FLOPS(4.0 * y.numel(), y.device(), softmax_backward, dy, y, dx, dim);
}

}  // namespace hpcnet::ops
