// Device dispatch for the kernel API: HPCNET_DISPATCH(device, fn, args...) calls cpu::fn or
// (in the CUDA build, HPCNET_WITH_CUDA) cuda::fn. A device without a backend for the op is a
// clear error, never a silent copy.
#pragma once

#include <string>

#include "hpcnet/profile.h"
#include "hpcnet/tensor.h"
#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/ops.h"
#ifdef HPCNET_WITH_CUDA
#include "src/ops/backend/cuda/cuda_ops.h"
#endif

namespace hpcnet::ops::detail {
[[noreturn]] void no_backend(const char* op, Device d);
// Checks that every defined tensor is on `d` and contiguous; names the op and the argument.
void check_same_device(const char* op, Device d, std::initializer_list<const Tensor*> ts);
// As check_same_device, but accepts blocked tensors too (for layout-aware kernels); tensors of
// the same rank must share one layout.
void check_same_device_dense(const char* op, Device d, std::initializer_list<const Tensor*> ts);
void check_dtype(const char* op, const Tensor& t, DType want, const char* arg);
}  // namespace hpcnet::ops::detail

namespace hpcnet::ops {
// t in the layout of `like` (t itself when it already is; a converted copy otherwise).
Tensor as_layout(const Tensor& t, const Tensor& like);
}  // namespace hpcnet::ops

namespace hpcnet::ops::detail {
void check_shape(const char* op, const Tensor& t, const Shape& want, const char* arg);
}  // namespace hpcnet::ops::detail

// The CUDA branch of the dispatch: empty in a build without CUDA.
#ifdef HPCNET_WITH_CUDA
#define HPCNET_DISPATCH_CUDA_(device, fn, ...) \
  else if ((device).is_cuda()) {               \
    ::hpcnet::cuda::fn(__VA_ARGS__);           \
  }
#else
#define HPCNET_DISPATCH_CUDA_(device, fn, ...)
#endif

// HPCNET_DISPATCH_FLOPS also tells the profiler the call's floating-point operation count (on
// CUDA the profiler times the launch, not the kernel).
#define HPCNET_DISPATCH_FLOPS(flops, device, fn, ...)   \
  do {                                                  \
    ::hpcnet::profile::Scope prof_scope_(#fn, (flops)); \
    if ((device).is_cpu()) {                            \
      ::hpcnet::cpu::fn(__VA_ARGS__);                   \
    }                                                   \
    HPCNET_DISPATCH_CUDA_(device, fn, __VA_ARGS__)      \
    else {                                              \
      ::hpcnet::ops::detail::no_backend(#fn, (device)); \
    }                                                   \
  } while (0)

#define HPCNET_DISPATCH(device, fn, ...) HPCNET_DISPATCH_FLOPS(0.0, device, fn, __VA_ARGS__)
