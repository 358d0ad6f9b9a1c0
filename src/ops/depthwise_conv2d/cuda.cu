// CUDA depthwise 2-D convolution on row-major (N, C, H, W): one thread per output pixel
// (forward) or input pixel (backward data) with math.h's gathers, and one block per (channel,
// filter tap) for the weight gradient (plus one per channel for the bias), each summing its
// products over N P Q in a fixed order (shared-memory tree): deterministic. Queued on the
// tensor's stream; nothing waits.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/depthwise_conv2d/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

math::DwGeom geom(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  return {x.size(2),  x.size(3),  y.size(2), y.size(3), w.size(2), w.size(3),
          p.stride_h, p.stride_w, p.pad_h,   p.pad_w,   p.dil_h,   p.dil_w};
}

// y (N C, P, Q) from x (N C, H, W), w (C, R, S), b (C,) or null.
template <class T>
__global__ void dw_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, T* __restrict__ y, int64_t c,
                                  int64_t total, math::DwGeom g) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = i / (g.p * g.q), pix = i % (g.p * g.q);
    const int64_t ch = plane % c;
    const T acc =
        math::dw_conv_pixel(x + plane * g.h * g.w, w + ch * g.r * g.s, g, pix / g.q, pix % g.q);
    y[i] = b ? acc + b[ch] : acc;
  }
}

template <class T>
__global__ void dw_backward_data_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                        T* __restrict__ dx, int64_t c, int64_t total,
                                        math::DwGeom g) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = i / (g.h * g.w), pix = i % (g.h * g.w);
    dx[i] = math::dw_conv_input_grad(dy + plane * g.p * g.q, w + plane % c * g.r * g.s, g,
                                     pix / g.w, pix % g.w);
  }
}

// Block (tap, ch): tap < R S sums dy x over (n, oh, ow) into dw[ch, tap]; tap == R S sums dy into
// db[ch] (when db is non-null).
template <class T>
__global__ void dw_backward_weights_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                           T* __restrict__ dw, T* __restrict__ db, int64_t n,
                                           int64_t c, math::DwGeom g) {
  const int64_t tap = blockIdx.x, ch = blockIdx.y;
  const bool bias = tap == g.r * g.s;
  if (bias && !db) return;
  const int64_t r = tap / g.s, s = tap % g.s, pq = g.p * g.q;
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n * pq; i += blockDim.x) {
    const int64_t img = i / pq, oh = i % pq / g.q, ow = i % g.q;
    const T* dyp = dy + (img * c + ch) * pq;
    if (bias) {
      acc += dyp[oh * g.q + ow];
      continue;
    }
    const int64_t ih = oh * g.st_h - g.pad_h + r * g.dil_h,
                  iw = ow * g.st_w - g.pad_w + s * g.dil_w;
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
      acc +=
          static_cast<double>(dyp[oh * g.q + ow]) * x[(img * c + ch) * g.h * g.w + ih * g.w + iw];
  }
  __shared__ double part[kThreads];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) (bias ? db[ch] : dw[ch * g.r * g.s + tap]) = static_cast<T>(part[0]);
}

}  // namespace

void depthwise_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                              const Conv2dParams& p) {
  cudaStream_t s = prepare(x);
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), op_name::depthwise_conv2d, [&](auto tag) {
    using T = decltype(tag);
    dw_forward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, y.data<T>(), x.size(1),
        total, geom(x, w, y, p));
    HPCNET_CUDA_LAUNCH(dw_forward_kernel);
  });
}

void depthwise_conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx,
                                    const Conv2dParams& p) {
  cudaStream_t s = prepare(dy);
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_float(dy.dtype(), "depthwise_conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    dw_backward_data_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dy.data<T>(), w.data<T>(), dx.data<T>(), dx.size(1), total, geom(dx, w, dy, p));
    HPCNET_CUDA_LAUNCH(dw_backward_data_kernel);
  });
}

void depthwise_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                                       const Conv2dParams& p) {
  cudaStream_t s = prepare(x);
  const int64_t c = x.size(1);
  if (c == 0) return;
  dispatch_float(x.dtype(), "depthwise_conv2d_backward_weights", [&](auto tag) {
    using T = decltype(tag);
    const math::DwGeom g = geom(x, dw, dy, p);
    const dim3 grid(static_cast<unsigned>(g.r * g.s + 1), static_cast<unsigned>(c));
    dw_backward_weights_kernel<T><<<grid, kThreads, 0, s>>>(x.data<T>(), dy.data<T>(), dw.data<T>(),
                                                            db.defined() ? db.data<T>() : nullptr,
                                                            x.size(0), c, g);
    HPCNET_CUDA_LAUNCH(dw_backward_weights_kernel);
  });
}

}  // namespace hpcnet::cuda
