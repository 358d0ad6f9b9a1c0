// CUDA GELU: one grid-stride kernel each way over contiguous tensors; the arithmetic is
// src/ops/gelu/math.h's (the CPU's). Queued on the tensor's stream; nothing waits.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/gelu/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void gelu_kernel(const T* x, T* y, int64_t n, bool tanh_approx) {  // may alias
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = math::gelu(x[i], tanh_approx);
}
template <class T>
__global__ void gelu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     T* __restrict__ dx, int64_t n, bool tanh_approx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dx[i] = math::gelu_grad(dy[i], x[i], tanh_approx);
}

}  // namespace

void gelu_forward(const Tensor& x, Tensor& y, bool tanh_approx) {
  cudaStream_t s = prepare(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::gelu, [&](auto tag) {
    using T = decltype(tag);
    gelu_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), n, tanh_approx);
    HPCNET_CUDA_LAUNCH(gelu_kernel);
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, bool tanh_approx) {
  cudaStream_t s = prepare(dy);
  const int64_t n = dy.numel();
  if (n == 0) return;
  dispatch_float(dy.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), x.data<T>(), dx.data<T>(), n, tanh_approx);
    HPCNET_CUDA_LAUNCH(gelu_backward_kernel);
  });
}

}  // namespace hpcnet::cuda
