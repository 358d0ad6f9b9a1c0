// CUDA softmax over one dim of a row-major tensor seen as (outer, n, inner). The last dim
// (inner = 1) runs one warp per row (shuffle reductions for the max and the sums, which
// accumulate in double as math.h's); other dims one thread per line with math.h's line arithmetic
// (neighbouring threads read neighbouring lines: coalesced). Queued on the tensor's stream.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/softmax/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

// x, y (rows, n): one warp per row.
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / kWarp);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T mx = xr[0];
    for (int64_t j = lane; j < n; j += kWarp) mx = xr[j] > mx ? xr[j] : mx;
    mx = warp_max(mx);
    double s = 0;
    for (int64_t j = lane; j < n; j += kWarp) {
      const T e = math::exp_t(xr[j] - mx);
      yr[j] = e;
      s += e;
    }
    const T inv = static_cast<T>(1.0 / warp_sum(s));
    for (int64_t j = lane; j < n; j += kWarp) yr[j] *= inv;
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(const T* dy, const T* y, T* dx, int64_t rows,
                                             int64_t n) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / kWarp);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const T* dyr = dy + r * n;
    const T* yr = y + r * n;
    double s = 0;
    for (int64_t j = lane; j < n; j += kWarp) s += static_cast<double>(dyr[j]) * yr[j];
    const T st = static_cast<T>(warp_sum(s));
    for (int64_t j = lane; j < n; j += kWarp) dx[r * n + j] = yr[j] * (dyr[j] - st);
  }
}

// One thread per line (o, i) of (outer, n, inner).
template <class T>
__global__ void softmax_lines_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < outer * inner;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at = t / inner * n * inner + t % inner;
    math::softmax_line(x + at, y + at, n, inner);
  }
}

template <class T>
__global__ void softmax_backward_lines_kernel(const T* dy, const T* y, T* dx, int64_t outer,
                                              int64_t n, int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < outer * inner;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at = t / inner * n * inner + t % inner;
    math::softmax_backward_line(dy + at, y + at, dx + at, n, inner);
  }
}

struct Lines {
  int64_t outer, n, inner;
};
Lines lines_of(const Tensor& x, int64_t dim) {
  Lines l{1, x.size(dim), 1};
  for (int64_t d = 0; d < dim; ++d) l.outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y, int64_t dim) {
  cudaStream_t s = prepare(x);
  if (x.numel() == 0) return;
  const Lines l = lines_of(x, dim);
  dispatch_float(x.dtype(), op_name::softmax, [&](auto tag) {
    using T = decltype(tag);
    if (l.inner == 1) {
      softmax_rows_kernel<T><<<grid_for(l.outer, kThreads / kWarp), kThreads, 0, s>>>(
          x.data<T>(), y.data<T>(), l.outer, l.n);
      HPCNET_CUDA_LAUNCH(softmax_rows_kernel);
    } else {
      softmax_lines_kernel<T><<<grid_for(l.outer * l.inner), kThreads, 0, s>>>(
          x.data<T>(), y.data<T>(), l.outer, l.n, l.inner);
      HPCNET_CUDA_LAUNCH(softmax_lines_kernel);
    }
  });
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t dim) {
  cudaStream_t s = prepare(y);
  if (y.numel() == 0) return;
  const Lines l = lines_of(y, dim);
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    if (l.inner == 1) {
      softmax_backward_rows_kernel<T><<<grid_for(l.outer, kThreads / kWarp), kThreads, 0, s>>>(
          dy.data<T>(), y.data<T>(), dx.data<T>(), l.outer, l.n);
      HPCNET_CUDA_LAUNCH(softmax_backward_rows_kernel);
    } else {
      softmax_backward_lines_kernel<T><<<grid_for(l.outer * l.inner), kThreads, 0, s>>>(
          dy.data<T>(), y.data<T>(), dx.data<T>(), l.outer, l.n, l.inner);
      HPCNET_CUDA_LAUNCH(softmax_backward_lines_kernel);
    }
  });
}

}  // namespace hpcnet::cuda
