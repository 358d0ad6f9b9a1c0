// The float32 / float64 dispatch every backend's kernels use.
#pragma once

#include <string>
#include <utility>

#include "hpcnet/tensor.h"

namespace hpcnet::ops::detail {

// Calls f(T{}) with T = float or double by dtype; another dtype is an Error naming the op and the
// backend ("CPU", "CUDA") that has no kernel for it.
template <class F>
void dispatch_float(DType t, const char* backend, const char* op, F&& f) {
  if (t == DType::kFloat32)
    std::forward<F>(f)(float{});
  else if (t == DType::kFloat64)
    std::forward<F>(f)(double{});
  else
    throw Error(std::string(op) + ": " + backend + " kernel for dtype " + dtype_name(t) +
                " is not implemented (float32 and float64 are)");
}

}  // namespace hpcnet::ops::detail
