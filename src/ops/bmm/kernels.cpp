// The kernel API of bmm (declared in src/ops/kernels.inc): checks, then dispatch to
// src/ops/bmm/cpu.cpp or cuda.cu. The kernel layer: no autograd (F::bmm is in functional.cpp).
#include <string>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void bmm(const Tensor& a, const Tensor& b, Tensor& c, bool transpose_a, bool transpose_b) {
  const char* op = op_name::bmm;
  HPCNET_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3,
               std::string(op) + ": a, b and the output must be 3-D, got " + shape_str(a.shape()) +
                   ", " + shape_str(b.shape()) + " and " + shape_str(c.shape()));
  const int64_t m = transpose_a ? a.size(2) : a.size(1), k = transpose_a ? a.size(1) : a.size(2);
  const int64_t kb = transpose_b ? b.size(2) : b.size(1), n = transpose_b ? b.size(1) : b.size(2);
  HPCNET_CHECK(b.size(0) == a.size(0) && kb == k, std::string(op) + ": b " + shape_str(b.shape()) +
                                                      " does not fit a " + shape_str(a.shape()));
  detail::check_dtype(op, b, a.dtype(), "b");
  detail::check_shape(op, c, {a.size(0), m, n}, "output");
  detail::check_dtype(op, c, a.dtype(), "output");
  detail::check_same_device(op, a.device(), {&a, &b, &c});
  HPCNET_DISPATCH_FLOPS(2.0 * static_cast<double>(c.numel()) * static_cast<double>(k), a.device(),
                        bmm, a, b, c, transpose_a, transpose_b);
}

}  // namespace hpcnet::ops
