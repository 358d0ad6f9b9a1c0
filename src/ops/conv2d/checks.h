// The argument checks and the flop count of the convolutions, shared by the kernel API
// (kernels.cpp) and F::conv2d / F::conv_transpose2d (functional.cpp).
#pragma once

#include <string>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {
// 2 * N * K * P * Q * C * R * S multiply-adds (the same for the forward and both backwards).
inline double conv_flops(const Tensor& w, const Tensor& y) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.numel() / w.size(0));
}

inline void check_conv(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  HPCNET_CHECK(x.dim() == 4,
               std::string(op) + ": input must be (N, C, H, W), got " + shape_str(x.shape()));
  HPCNET_CHECK(w.dim() == 4 && w.size(1) == x.size(1),
               std::string(op) + ": weight " + shape_str(w.shape()) + " does not fit input " +
                   shape_str(x.shape()));
  // A bfloat16 input (CPU --precision bf16, converted by the node) runs with float32 weights.
  const DType want = x.dtype() == DType::kBFloat16 ? DType::kFloat32 : x.dtype();
  detail::check_dtype(op, w, want, "weight");
  if (b.defined()) {
    detail::check_shape(op, b, {w.size(0)}, "bias");
    detail::check_dtype(op, b, want, "bias");
  }
  detail::check_same_device_dense(op, x.device(), {&x});  // x may be blocked
  detail::check_same_device(op, x.device(), {&w, &b});
}

}  // namespace hpcnet::ops
