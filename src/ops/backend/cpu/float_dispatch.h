// Calls f(T{}) with T = float or double according to a tensor's dtype; other dtypes are an error
// naming the op.
#pragma once

#include <utility>

#include "src/ops/float_dispatch.h"

namespace hpcnet::cpu {

template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  ops::detail::dispatch_float(t, "CPU", op, std::forward<F>(f));
}

}  // namespace hpcnet::cpu
