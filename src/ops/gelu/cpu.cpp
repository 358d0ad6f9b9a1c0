// CPU GELU: one pass over contiguous tensors (any dense layout), OpenMP when large; the
// per-element arithmetic is src/ops/gelu/math.h's, shared with the CUDA kernel.
#include <cstdint>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/gelu/math.h"

namespace hpcnet::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
}

void gelu_forward(const Tensor& x, Tensor& y, bool tanh_approx) {
  dispatch_float(x.dtype(), op_name::gelu, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) py[i] = math::gelu(px[i], tanh_approx);
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, bool tanh_approx) {
  dispatch_float(dy.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    T* pdx = dx.data<T>();
    const int64_t n = dy.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) pdx[i] = math::gelu_grad(pdy[i], px[i], tanh_approx);
  });
}

}  // namespace hpcnet::cpu
