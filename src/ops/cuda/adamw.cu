// CUDA kernels of the optimizer extras, with the CPU kernels' arithmetic (src/ops/cpu/adamw.cpp):
// fused AdamW (one launch per parameter), the squared norm for gradient clipping (one block,
// fixed order, double accumulation) and lerp for the EMA of weights.
#include <cmath>

#include "src/ops/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

template <class T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                             T* __restrict__ v, int64_t n, T decay, T b1, T b2, T step_size,
                             T inv_sqrt_bc2, T eps) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    T pi = p[i] * decay;
    T mi = b1 * m[i] + (1 - b1) * g[i];
    T vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

template <class T>
__global__ void sum_squares_kernel(const T* __restrict__ x, double* __restrict__ out, int64_t n) {
  __shared__ double part[kReduceThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    double v = static_cast<double>(x[i]);
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

template <class T>
__global__ void lerp_kernel(T* a, const T* b, T w, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    a[i] += w * (b[i] - a[i]);
}

}  // namespace

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& exp_avg, std::vector<Tensor>& exp_avg_sq,
                const AdamWParams& h) {
  const double bc1 = 1 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1 - std::pow(h.beta2, static_cast<double>(h.step));
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined()) continue;
    cudaStream_t s = prepare(params[k]);
    const int64_t n = params[k].numel();
    if (n == 0) continue;
    dispatch_float(params[k].dtype(), "adamw_step", [&](auto tag) {
      using T = decltype(tag);
      adamw_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
          params[k].data<T>(), grads[k].data<T>(), exp_avg[k].data<T>(), exp_avg_sq[k].data<T>(),
          n, static_cast<T>(1 - h.lr * h.weight_decay), static_cast<T>(h.beta1),
          static_cast<T>(h.beta2), static_cast<T>(h.lr / bc1), static_cast<T>(1 / std::sqrt(bc2)),
          static_cast<T>(h.eps));
      HPCNET_CUDA_LAUNCH(adamw_kernel);
    });
  }
}

void sum_squares(const Tensor& x, Tensor& out) {
  cudaStream_t s = prepare(x);
  dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_kernel<T><<<1, kReduceThreads, 0, s>>>(x.data<T>(), out.data<double>(), x.numel());
    HPCNET_CUDA_LAUNCH(sum_squares_kernel);
  });
}

void lerp_inplace(Tensor& a, const Tensor& b, double w) {
  cudaStream_t s = prepare(a);
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_float(a.dtype(), "lerp", [&](auto tag) {
    using T = decltype(tag);
    lerp_kernel<T><<<grid_for(n), kThreads, 0, s>>>(a.data<T>(), b.data<T>(), static_cast<T>(w), n);
    HPCNET_CUDA_LAUNCH(lerp_kernel);
  });
}

}  // namespace hpcnet::cuda
