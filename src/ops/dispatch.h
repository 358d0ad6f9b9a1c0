// Device dispatch for the kernel API: HPCNET_DISPATCH(device, fn, args...) calls cpu::fn or
// cuda::fn. A device without a backend for the op is a clear error, never a silent copy.
#pragma once

#include <string>

#include "hpcnet/tensor.h"
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/ops.h"

namespace hpcnet::ops::detail {
[[noreturn]] void no_backend(const char* op, Device d);
// Checks that every defined tensor is on `d` and contiguous; names the op and the argument.
void check_same_device(const char* op, Device d, std::initializer_list<const Tensor*> ts);
void check_dtype(const char* op, const Tensor& t, DType want, const char* arg);
void check_shape(const char* op, const Tensor& t, const Shape& want, const char* arg);
}  // namespace hpcnet::ops::detail

#define HPCNET_DISPATCH(device, fn, ...)                   \
  do {                                                     \
    if ((device).is_cpu()) {                               \
      ::hpcnet::cpu::fn(__VA_ARGS__);                      \
    } else {                                               \
      ::hpcnet::ops::detail::no_backend(#fn, (device));    \
    }                                                      \
  } while (0)
