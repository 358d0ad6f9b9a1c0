// The kernel API of cat_forward / _backward (declared in src/ops/kernels.inc): each function checks
// its arguments and dispatches on the device to src/ops/cat/cpu.cpp or cuda.cu. The kernel layer:
// no autograd, no tape (the differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/cat/shapes.h"
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void cat_forward(const std::vector<Tensor>& xs, Tensor& y, int64_t dim) {
  HPCNET_CHECK(!xs.empty() && dim >= 0 && dim < y.dim(), "cat: need inputs and 0 <= dim < rank");
  detail::check_shape(op_name::cat, y, cat_shape(xs, dim), "output");
  detail::check_dtype(op_name::cat, y, xs[0].dtype(), "output");
  // Row-major throughout, or (CPU) blocked throughout along the channels.
  for (const Tensor& x : xs) detail::check_same_device_dense(op_name::cat, y.device(), {&y, &x});
  HPCNET_CHECK(y.layout() == Layout::kStrided || dim == 1,
               "cat: blocked tensors are concatenated along dim 1 only");
  HPCNET_DISPATCH(y.device(), cat_forward, xs, y, dim);
}

void cat_backward(const Tensor& dy, const std::vector<int64_t>& sizes, std::vector<Tensor>& dxs,
                  int64_t dim) {
  HPCNET_CHECK(!sizes.empty() && sizes.size() == dxs.size() && dim >= 0 && dim < dy.dim(),
               "cat_backward: need one size per gradient and 0 <= dim < rank");
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    total += sizes[i];
    if (!dxs[i].defined()) continue;
    Shape want = dy.shape();
    want[dim] = sizes[i];
    detail::check_shape("cat_backward", dxs[i], want, "gradient");
    detail::check_dtype("cat_backward", dxs[i], dy.dtype(), "gradient");
    detail::check_same_device_dense("cat_backward", dy.device(), {&dy, &dxs[i]});
  }
  HPCNET_CHECK(total == dy.size(dim),
               "cat_backward: the sizes along dim do not add up to dy's " + shape_str(dy.shape()));
  detail::check_same_device_dense("cat_backward", dy.device(), {&dy});
  HPCNET_CHECK(dy.layout() == Layout::kStrided || dim == 1,
               "cat_backward: blocked tensors are split along dim 1 only");
  HPCNET_DISPATCH(dy.device(), cat_backward, dy, sizes, dxs, dim);
}

}  // namespace hpcnet::ops
