// CUDA kernels of the optimizer extras: fused AdamW (one launch per parameter) and lerp for the
// EMA of weights with src/ops/adamw/math.h's arithmetic (the CPU kernels' too), and the
// squared norm for gradient clipping (one block, fixed order, double accumulation).
#include <cmath>

#include "src/ops/adamw/math.h"
#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

template <class T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                             T* __restrict__ v, int64_t n, math::AdamWCoeffs<T> c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    math::adamw_element(p[i], g[i], m[i], v[i], c);
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
    math::lerp(a[i], b[i], w);
}

}  // namespace

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& exp_avg, std::vector<Tensor>& exp_avg_sq,
                const AdamWParams& h) {
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined()) continue;
    cudaStream_t s = prepare(params[k]);
    const int64_t n = params[k].numel();
    if (n == 0) continue;
    dispatch_float(params[k].dtype(), "adamw_step", [&](auto tag) {
      using T = decltype(tag);
      adamw_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
          params[k].data<T>(), grads[k].data<T>(), exp_avg[k].data<T>(), exp_avg_sq[k].data<T>(),
          n, math::adamw_coeffs<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step));
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
