// The argument checks of the softmax losses, shared by the kernel API (kernels.cpp) and the F::
// functions (functional.cpp): InputErrors naming the op, the argument and the shapes.
#pragma once

#include <cstdio>
#include <string>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {
// A double as %g writes it (1e-07, not to_string's 0.000000), for argument errors.
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

inline void check_rows_targets(const char* op, const Tensor& x, const Tensor& target) {
  HPCNET_CHECK(x.dim() == 2,
               std::string(op) + ": input must be (N, C), got " + shape_str(x.shape()));
  HPCNET_CHECK(x.size(0) > 0, std::string(op) + ": empty batch, input " + shape_str(x.shape()));
  detail::check_dtype(op, target, DType::kInt64, "target");
  detail::check_shape(op, target, {x.size(0)}, "target");
  detail::check_same_device(op, x.device(), {&x, &target});
}
inline bool is_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// The arguments of cross_entropy2d and dice_loss, as InputErrors naming the op and the shapes:
// logits (N, C, H, W) float with C >= 1, target (N, H, W) int64, weight undefined or (C,) of
// logits' dtype.
inline void check_dense_targets(const std::string& op, const Tensor& logits, const Tensor& target,
                                const Tensor& weight) {
  HPCNET_REQUIRE(logits.defined() && target.defined(),
                 op + ": logits and target must be defined, got an undefined " +
                     (logits.defined() ? "target" : "logits"));
  const std::string shapes =
      " (logits " + shape_str(logits.shape()) + ", target " + shape_str(target.shape()) + ")";
  HPCNET_REQUIRE(logits.dim() == 4, op + ": logits must be (N, C, H, W)" + shapes);
  HPCNET_REQUIRE(logits.size(1) >= 1, op + ": logits need at least one class" + shapes);
  HPCNET_REQUIRE(is_float(logits.dtype()),
                 (op + ": logits must be float32 or float64, got ") + dtype_name(logits.dtype()));
  HPCNET_REQUIRE(target.dtype() == DType::kInt64,
                 (op + ": target must be int64 class indices, got ") + dtype_name(target.dtype()));
  HPCNET_REQUIRE(target.shape() == Shape({logits.size(0), logits.size(2), logits.size(3)}),
                 op + ": target must be (N, H, W) of logits (N, C, H, W)" + shapes);
  if (weight.defined()) {
    HPCNET_REQUIRE(weight.shape() == Shape({logits.size(1)}),
                   op + ": weight must be (C,) = (" + std::to_string(logits.size(1)) + ",), got " +
                       shape_str(weight.shape()));
    HPCNET_REQUIRE(weight.dtype() == logits.dtype(), (op + ": weight has dtype ") +
                                                         dtype_name(weight.dtype()) + ", logits " +
                                                         dtype_name(logits.dtype()));
  }
}
inline void check_cross_entropy2d(const Tensor& logits, const Tensor& target,
                                  const Tensor& weight) {
  check_dense_targets(op_name::cross_entropy2d, logits, target, weight);
}

}  // namespace hpcnet::ops
