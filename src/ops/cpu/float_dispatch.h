// Calls f(T{}) with T = float or double according to a tensor's dtype; other dtypes are an error
// naming the op.
#pragma once

#include <string>

#include "hpcnet/tensor.h"

namespace hpcnet::cpu {

template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::kFloat32)
    f(float{});
  else if (t == DType::kFloat64)
    f(double{});
  else
    throw Error(std::string(op) + ": CPU kernel for dtype " + dtype_name(t) +
                " is not implemented (float32 and float64 are)");
}

}  // namespace hpcnet::cpu
