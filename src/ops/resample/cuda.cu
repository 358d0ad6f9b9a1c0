// CUDA kernels for global average pooling, the ResNet option-A shortcut (subsample_pad),
// dropout's mask-and-scale and nearest upsampling, with the CPU kernels' semantics
// (src/ops/resample/cpu.cpp); the upsampling gradient sums each block with the CPU's arithmetic
// (math::upsample_nearest_grad), so both backends give the same bits.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/resample/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

#define HPCNET_GRID_LOOP(i, n)                                              \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// One thread per (n, c) plane: planes are small (H W <= 64 in the ResNets' heads).
template <class T>
__global__ void gap_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t hw) {
  HPCNET_GRID_LOOP(i, planes) {
    T acc = 0;
    for (int64_t j = 0; j < hw; ++j) acc += x[i * hw + j];
    y[i] = acc / static_cast<T>(hw);
  }
}

template <class T>
__global__ void gap_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t total,
                                    int64_t hw) {
  HPCNET_GRID_LOOP(i, total) dx[i] = dy[i / hw] / static_cast<T>(hw);
}

// One thread per element of y (N, K, P, Q); forward gathers from x, backward (one thread per
// element of dx) gathers from dy.
template <class T>
__global__ void subsample_pad_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total,
                                     int64_t c, int64_t h, int64_t w, int64_t k, int64_t p,
                                     int64_t q, int64_t s, int64_t pad) {
  HPCNET_GRID_LOOP(i, total) {
    int64_t j = i % q, t = i / q;
    int64_t r = t % p;
    t /= p;
    int64_t ch = t % k - pad, b = t / k;
    y[i] = (ch >= 0 && ch < c) ? x[((b * c + ch) * h + r * s) * w + j * s] : T(0);
  }
}

template <class T>
__global__ void subsample_pad_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                              int64_t total, int64_t c, int64_t h, int64_t w,
                                              int64_t k, int64_t p, int64_t q, int64_t s,
                                              int64_t pad) {
  HPCNET_GRID_LOOP(i, total) {
    int64_t col = i % w, t = i / w;
    int64_t row = t % h;
    t /= h;
    int64_t ch = t % c, b = t / c;
    bool hit = row % s == 0 && col % s == 0;
    dx[i] = hit ? dy[((b * k + pad + ch) * p + row / s) * q + col / s] : T(0);
  }
}

template <class T>
__global__ void mask_scale_kernel(const T* __restrict__ x, const uint8_t* __restrict__ m, T s,
                                  T* __restrict__ out, int64_t n) {
  HPCNET_GRID_LOOP(i, n) out[i] = m[i] ? x[i] * s : T(0);
}

// One thread per element of y (N, C, H s, W s), gathering from x (N, C, H, W).
template <class T>
__global__ void upsample_nearest2d_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total,
                                          int64_t h, int64_t w, int64_t s) {
  const int64_t ws = w * s, hs = h * s;
  HPCNET_GRID_LOOP(i, total) {
    int64_t col = i % ws, t = i / ws;
    int64_t row = t % hs, plane = t / hs;
    y[i] = x[(plane * h + row / s) * w + col / s];
  }
}

// One thread per element of dx (N, C, H, W), summing its s x s block of dy.
template <class T>
__global__ void upsample_nearest2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                                   int64_t total, int64_t h, int64_t w, int64_t s) {
  HPCNET_GRID_LOOP(i, total) {
    int64_t col = i % w, t = i / w;
    int64_t row = t % h, plane = t / h;
    dx[i] = math::upsample_nearest_grad(dy + plane * h * s * w * s, w, s, row, col);
  }
}

// One thread per element of y (N, C, OH, OW): math::bilinear_sample, as the CPU.
template <class T>
__global__ void upsample_bilinear2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                           int64_t total, int64_t h, int64_t w, int64_t oh,
                                           int64_t ow, bool align) {
  HPCNET_GRID_LOOP(i, total) {
    int64_t ox = i % ow, t = i / ow;
    int64_t oy = t % oh, plane = t / oh;
    y[i] = math::bilinear_sample(x + plane * h * w, h, w, oh, ow, oy, ox, align);
  }
}

// One thread per element of dx (N, C, H, W), gathering its share of dy (math::bilinear_grad:
// the CPU's order, so the same bits and no atomics).
template <class T>
__global__ void upsample_bilinear2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                                    int64_t total, int64_t h, int64_t w, int64_t oh,
                                                    int64_t ow, bool align) {
  HPCNET_GRID_LOOP(i, total) {
    int64_t ix = i % w, t = i / w;
    int64_t iy = t % h, plane = t / h;
    dx[i] = math::bilinear_grad(dy + plane * oh * ow, h, w, oh, ow, iy, ix, align);
  }
}

}  // namespace

void global_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  const int64_t planes = x.size(0) * x.size(1), hw = x.size(2) * x.size(3);
  if (planes == 0) return;
  dispatch_float(x.dtype(), op_name::global_avg_pool2d, [&](auto tag) {
    using T = decltype(tag);
    gap_kernel<T><<<grid_for(planes), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), planes, hw);
    HPCNET_CUDA_LAUNCH(gap_kernel);
  });
}

void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) {
  cudaStream_t s = prepare(dy);
  const int64_t total = dx.numel(), hw = dx.size(2) * dx.size(3);
  if (total == 0) return;
  dispatch_float(dy.dtype(), "global_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    gap_backward_kernel<T>
        <<<grid_for(total), kThreads, 0, s>>>(dy.data<T>(), dx.data<T>(), total, hw);
    HPCNET_CUDA_LAUNCH(gap_backward_kernel);
  });
}

void subsample_pad_forward(const Tensor& x, Tensor& y, int64_t stride, int64_t pad) {
  cudaStream_t s = prepare(x);
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), op_name::subsample_pad, [&](auto tag) {
    using T = decltype(tag);
    subsample_pad_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        x.data<T>(), y.data<T>(), total, x.size(1), x.size(2), x.size(3), y.size(1), y.size(2),
        y.size(3), stride, pad);
    HPCNET_CUDA_LAUNCH(subsample_pad_kernel);
  });
}

void subsample_pad_backward(const Tensor& dy, Tensor& dx, int64_t stride, int64_t pad) {
  cudaStream_t s = prepare(dy);
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_float(dy.dtype(), "subsample_pad_backward", [&](auto tag) {
    using T = decltype(tag);
    subsample_pad_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dy.data<T>(), dx.data<T>(), total, dx.size(1), dx.size(2), dx.size(3), dy.size(1),
        dy.size(2), dy.size(3), stride, pad);
    HPCNET_CUDA_LAUNCH(subsample_pad_backward_kernel);
  });
}

void mask_scale(const Tensor& x, const Tensor& mask, double f, Tensor& out) {
  cudaStream_t s = prepare(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::dropout, [&](auto tag) {
    using T = decltype(tag);
    mask_scale_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), mask.data<uint8_t>(),
                                                          static_cast<T>(f), out.data<T>(), n);
    HPCNET_CUDA_LAUNCH(mask_scale_kernel);
  });
}

void upsample_nearest2d_forward(const Tensor& x, Tensor& y, int64_t scale) {
  cudaStream_t s = prepare(x);
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), op_name::upsample_nearest2d, [&](auto tag) {
    using T = decltype(tag);
    upsample_nearest2d_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        x.data<T>(), y.data<T>(), total, x.size(2), x.size(3), scale);
    HPCNET_CUDA_LAUNCH(upsample_nearest2d_kernel);
  });
}

void upsample_nearest2d_backward(const Tensor& dy, Tensor& dx, int64_t scale) {
  cudaStream_t s = prepare(dy);
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_float(dy.dtype(), "upsample_nearest2d_backward", [&](auto tag) {
    using T = decltype(tag);
    upsample_nearest2d_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dy.data<T>(), dx.data<T>(), total, dx.size(2), dx.size(3), scale);
    HPCNET_CUDA_LAUNCH(upsample_nearest2d_backward_kernel);
  });
}

void upsample_bilinear2d_forward(const Tensor& x, Tensor& y, bool align) {
  cudaStream_t s = prepare(x);
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), op_name::upsample_bilinear2d, [&](auto tag) {
    using T = decltype(tag);
    upsample_bilinear2d_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        x.data<T>(), y.data<T>(), total, x.size(2), x.size(3), y.size(2), y.size(3), align);
    HPCNET_CUDA_LAUNCH(upsample_bilinear2d_kernel);
  });
}

void upsample_bilinear2d_backward(const Tensor& dy, Tensor& dx, bool align) {
  cudaStream_t s = prepare(dy);
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_float(dy.dtype(), "upsample_bilinear2d_backward", [&](auto tag) {
    using T = decltype(tag);
    upsample_bilinear2d_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dy.data<T>(), dx.data<T>(), total, dx.size(2), dx.size(3), dy.size(2), dy.size(3), align);
    HPCNET_CUDA_LAUNCH(upsample_bilinear2d_backward_kernel);
  });
}

}  // namespace hpcnet::cuda
