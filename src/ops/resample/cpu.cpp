// CPU kernels for the small data-movement ops of the ResNets and the U-Net: global average
// pooling, the option-A shortcut (subsample and zero-pad channels), dropout's mask-and-scale and
// nearest upsampling by an integer factor (also on blocked nChw16c tensors). Contiguous NCHW;
// plain loops that vectorise, OpenMP over (n, c) planes when the tensor is large.
#include <cstring>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/resample/math.h"

namespace hpcnet::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 15;
}

void global_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), op_name::global_avg_pool2d, [&](auto tag) {
    using T = decltype(tag);
    const int64_t planes = x.size(0) * x.size(1), hw = x.size(2) * x.size(3);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const T inv = T(1) / static_cast<T>(hw);
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
    for (int64_t i = 0; i < planes; ++i) {
      T acc = 0;
      const T* p = px + i * hw;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < hw; ++j) acc += p[j];
      py[i] = acc * inv;
    }
  });
}

void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) {
  dispatch_float(dy.dtype(), "global_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t planes = dx.size(0) * dx.size(1), hw = dx.size(2) * dx.size(3);
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const T inv = T(1) / static_cast<T>(hw);
#pragma omp parallel for schedule(static) if (planes * hw > kParallelMin)
    for (int64_t i = 0; i < planes; ++i) {
      T v = pdy[i] * inv;
      T* p = pdx + i * hw;
#pragma omp simd
      for (int64_t j = 0; j < hw; ++j) p[j] = v;
    }
  });
}

namespace {
// Calls f(x_offset, y_offset) for each sampled element: x[n, c, i s, j s] -> y[n, pad + c, i, j].
template <class F>
void for_each_sample(const Shape& xs, const Shape& ys, int64_t s, int64_t pad, F&& f) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t k = ys[1], p = ys[2], q = ys[3];
#pragma omp parallel for collapse(2) schedule(static) if (n * k * p * q > kParallelMin)
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j < q; ++j)
          f(((b * c + ch) * h + i * s) * w + j * s, ((b * k + pad + ch) * p + i) * q + j);
}

// Zeroes channels [0, pad) and [pad + c, k) of every sample of y (N, K, P, Q).
template <class T>
void zero_pad_channels(T* y, const Shape& ys, int64_t c, int64_t pad) {
  const int64_t plane = ys[2] * ys[3];
  for (int64_t b = 0; b < ys[0]; ++b) {
    T* yb = y + b * ys[1] * plane;
    std::memset(yb, 0, sizeof(T) * pad * plane);
    std::memset(yb + (pad + c) * plane, 0, sizeof(T) * (ys[1] - pad - c) * plane);
  }
}
}  // namespace

void subsample_pad_forward(const Tensor& x, Tensor& y, int64_t stride, int64_t pad) {
  dispatch_float(x.dtype(), op_name::subsample_pad, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    zero_pad_channels(py, y.shape(), x.size(1), pad);
    for_each_sample(x.shape(), y.shape(), stride, pad,
                    [&](int64_t xi, int64_t yi) { py[yi] = px[xi]; });
  });
}

void subsample_pad_backward(const Tensor& dy, Tensor& dx, int64_t stride, int64_t pad) {
  dispatch_float(dy.dtype(), "subsample_pad_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    if (stride != 1) std::memset(pdx, 0, dx.nbytes());
    for_each_sample(dx.shape(), dy.shape(), stride, pad,
                    [&](int64_t xi, int64_t yi) { pdx[xi] = pdy[yi]; });
  });
}

void mask_scale(const Tensor& x, const Tensor& mask, double s, Tensor& out) {
  dispatch_float(x.dtype(), op_name::dropout, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const uint8_t* pm = mask.data<uint8_t>();
    T* po = out.data<T>();
    const T f = static_cast<T>(s);
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) po[i] = pm[i] ? px[i] * f : T(0);
  });
}

// Each output row i of a plane is input row i / s with every element repeated s times: built once
// per input row, then copied to the s - 1 rows below it. A blocked (nChw16c) tensor is planes of
// (n, 16-channel block) whose elements are 16 channels: the same loops over 16-value elements.
void upsample_nearest2d_forward(const Tensor& x, Tensor& y, int64_t s) {
  dispatch_float(x.dtype(), op_name::upsample_nearest2d, [&](auto tag) {
    using T = decltype(tag);
    const int64_t v = x.layout() == Layout::kBlocked16 ? 16 : 1;  // values per element
    const int64_t planes = x.size(0) * x.size(1) / v, h = x.size(2), w = x.size(3), ws = w * s;
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (y.numel() > kParallelMin)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < h; ++i) {
        const T* src = px + (pl * h + i) * w * v;
        T* dst = py + (pl * h + i) * s * ws * v;
        if (v == 1) {
          for (int64_t j = 0; j < w; ++j)
            for (int64_t b = 0; b < s; ++b) dst[j * s + b] = src[j];
        } else {
          for (int64_t j = 0; j < w; ++j)
            for (int64_t b = 0; b < s; ++b)
              std::memcpy(dst + (j * s + b) * v, src + j * v, sizeof(T) * v);
        }
        for (int64_t a = 1; a < s; ++a) std::memcpy(dst + a * ws * v, dst, sizeof(T) * ws * v);
      }
  });
}

void upsample_nearest2d_backward(const Tensor& dy, Tensor& dx, int64_t s) {
  dispatch_float(dy.dtype(), "upsample_nearest2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t h = dx.size(2), w = dx.size(3);
    const int64_t out_plane = h * s * w * s;
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    if (dx.layout() == Layout::kBlocked16) {
      constexpr int64_t v = 16;
      const int64_t planes = dx.size(0) * dx.size(1) / v, ws = w * s;
#pragma omp parallel for schedule(static) if (dy.numel() > kParallelMin)
      for (int64_t pl = 0; pl < planes; ++pl)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < w; ++j) {
            T acc[v] = {};
            const T* p = pdy + (pl * out_plane + i * s * ws + j * s) * v;
            for (int64_t a = 0; a < s; ++a)
              for (int64_t b = 0; b < s; ++b)
#pragma omp simd
                for (int64_t t = 0; t < v; ++t) acc[t] += p[(a * ws + b) * v + t];
            std::memcpy(pdx + ((pl * h + i) * w + j) * v, acc, sizeof(acc));
          }
      return;
    }
    const int64_t planes = dx.size(0) * dx.size(1);
#pragma omp parallel for schedule(static) if (dy.numel() > kParallelMin)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          pdx[(pl * h + i) * w + j] = math::upsample_nearest_grad(pdy + pl * out_plane, w, s, i, j);
  });
}

void upsample_bilinear2d_forward(const Tensor& x, Tensor& y, bool align) {
  dispatch_float(x.dtype(), op_name::upsample_bilinear2d, [&](auto tag) {
    using T = decltype(tag);
    const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
    const int64_t oh = y.size(2), ow = y.size(3);
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (y.numel() > kParallelMin)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          py[(pl * oh + oy) * ow + ox] =
              math::bilinear_sample(px + pl * h * w, h, w, oh, ow, oy, ox, align);
  });
}

void upsample_bilinear2d_backward(const Tensor& dy, Tensor& dx, bool align) {
  dispatch_float(dy.dtype(), "upsample_bilinear2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t planes = dx.size(0) * dx.size(1), h = dx.size(2), w = dx.size(3);
    const int64_t oh = dy.size(2), ow = dy.size(3);
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static) if (dy.numel() > kParallelMin)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t iy = 0; iy < h; ++iy)
        for (int64_t ix = 0; ix < w; ++ix)
          pdx[(pl * h + iy) * w + ix] =
              math::bilinear_grad(pdy + pl * oh * ow, h, w, oh, ow, iy, ix, align);
  });
}

}  // namespace hpcnet::cpu
