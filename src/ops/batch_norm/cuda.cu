// CUDA batch normalisation over NCHW with the CPU kernel's arithmetic (src/ops/batch_norm/cpu.cpp,
// the per-channel formulas shared through src/ops/batch_norm/math.h):
// one block per channel reduces that channel's N planes (shifted sums, accumulated in double in a
// fixed order, so results are deterministic), then the same block writes the output or dx.
#include <cmath>

#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/batch_norm/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kBnThreads = 256;

// Block-wide sum of two doubles (all threads get the result).
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kBnThreads], sb[kBnThreads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      sa[threadIdx.x] += sa[threadIdx.x + s];
      sb[threadIdx.x] += sb[threadIdx.x + s];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();
}

template <class T>
__global__ void bn_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, const T* __restrict__ res,
                                  T* __restrict__ rm, T* __restrict__ rv, T* __restrict__ y,
                                  T* __restrict__ sm, T* __restrict__ si, int64_t n, int64_t c,
                                  int64_t hw, BatchNormParams p) {
  const int64_t ch = blockIdx.x;
  const int64_t total = n * hw;
  const double m = static_cast<double>(total);
  math::BnStats st;
  if (p.training) {
    const T shift = x[ch * hw];
    double s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
      double v = static_cast<double>(x[((i / hw) * c + ch) * hw + i % hw] - shift);
      s1 += v;
      s2 += v * v;
    }
    block_sum2(s1, s2);
    st = math::bn_batch_stats(s1, s2, static_cast<double>(shift), m, p.eps);
    if (threadIdx.x == 0)
      math::bn_update_running(rm ? rm + ch : nullptr, rv ? rv + ch : nullptr, st, m, p.momentum);
  } else {
    st = math::bn_running_stats(rm[ch], rv[ch], p.eps);
  }
  if (threadIdx.x == 0) {
    sm[ch] = static_cast<T>(st.mean);
    si[ch] = static_cast<T>(st.invstd);
  }
  const math::BnAffine<T> af = math::bn_affine(st, w ? w + ch : nullptr, b ? b + ch : nullptr);
  const T mm = af.m, a = af.a, bb = af.b;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    int64_t off = ((i / hw) * c + ch) * hw + i % hw;
    T v = (x[off] - mm) * a + bb;
    if (res) v += res[off];
    y[off] = p.relu ? (v > T(0) ? v : T(0)) : v;
  }
}

template <class T>
__global__ void bn_backward_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                   const T* __restrict__ w, const T* __restrict__ sm,
                                   const T* __restrict__ si, T* __restrict__ dx,
                                   T* __restrict__ dw, T* __restrict__ db, int64_t n, int64_t c,
                                   int64_t hw, BatchNormParams p) {
  const int64_t ch = blockIdx.x;
  const int64_t total = n * hw;
  const double m = static_cast<double>(total);
  const T mean = sm[ch];
  const double invstd = si[ch];
  double sum_g = 0, sum_gx = 0;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    int64_t off = ((i / hw) * c + ch) * hw + i % hw;
    sum_g += static_cast<double>(g[off]);
    sum_gx += static_cast<double>(g[off] * (x[off] - mean));
  }
  block_sum2(sum_g, sum_gx);
  if (threadIdx.x == 0) {
    if (dw) dw[ch] = static_cast<T>(sum_gx * invstd);
    if (db) db[ch] = static_cast<T>(sum_g);
  }
  if (!dx) return;
  const math::BnBackward<T> bc =
      math::bn_backward_coeffs(w ? w + ch : nullptr, invstd, sum_g, sum_gx, m, p.training);
  const T k = bc.k, c0 = bc.c0, c1 = bc.c1;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    int64_t off = ((i / hw) * c + ch) * hw + i % hw;
    dx[off] = k * g[off] + c0 + c1 * (x[off] - mean);
  }
}

template <class T>
const T* opt(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* opt_mut(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, Tensor& running_mean, Tensor& running_var,
                        Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                        const BatchNormParams& p) {
  cudaStream_t s = prepare(x);
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  if (c == 0) return;
  dispatch_float(x.dtype(), op_name::batch_norm, [&](auto tag) {
    using T = decltype(tag);
    bn_forward_kernel<T><<<static_cast<unsigned>(c), kBnThreads, 0, s>>>(
        x.data<T>(), opt<T>(weight), opt<T>(bias), opt<T>(residual), opt_mut<T>(running_mean),
        opt_mut<T>(running_var), y.data<T>(), save_mean.data<T>(), save_invstd.data<T>(), n, c,
        hw, p);
    HPCNET_CUDA_LAUNCH(bn_forward_kernel);
  });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                         const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                         Tensor& dweight, Tensor& dbias, const BatchNormParams& p) {
  cudaStream_t s = prepare(x);
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  if (c == 0) return;
  dispatch_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    bn_backward_kernel<T><<<static_cast<unsigned>(c), kBnThreads, 0, s>>>(
        g.data<T>(), x.data<T>(), opt<T>(weight), save_mean.data<T>(), save_invstd.data<T>(),
        opt_mut<T>(dx), opt_mut<T>(dweight), opt_mut<T>(dbias), n, c, hw, p);
    HPCNET_CUDA_LAUNCH(bn_backward_kernel);
  });
}

}  // namespace hpcnet::cuda
