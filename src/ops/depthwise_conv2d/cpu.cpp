// CPU depthwise 2-D convolution on row-major (N, C, H, W) planes, float32 and float64: OpenMP over
// the N C planes (forward, backward data) or over the C channels (weight and bias gradients, so
// each thread owns its channel's sums: the same result for any thread count). Each filter tap
// runs along an output row (a contiguous loop at stride 1, which vectorises), over the columns
// whose tap lies inside the input (math::dw_valid_range): no test per element. The weight
// gradient's row sums are OpenMP simd reductions (vector lanes, then their sum).
#include <cstdint>
#include <cstring>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/depthwise_conv2d/math.h"

namespace hpcnet::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // multiply-adds below which loops stay serial

math::DwGeom geom(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  return {x.size(2),  x.size(3),  y.size(2), y.size(3), w.size(2), w.size(3),
          p.stride_h, p.stride_w, p.pad_h,   p.pad_w,   p.dil_h,   p.dil_w};
}

// Calls f(oh, ih, r, s, lo, hi) for every output row oh, filter tap (r, s) whose input row ih is
// inside the plane, and its valid output columns [lo, hi) (input column ow st - pad + s dil).
template <class F>
void for_taps(const math::DwGeom& g, F&& f) {
  for (int64_t oh = 0; oh < g.p; ++oh)
    for (int64_t r = 0; r < g.r; ++r) {
      const int64_t ih = oh * g.st_h - g.pad_h + r * g.dil_h;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t s = 0; s < g.s; ++s) {
        int64_t lo, hi;
        math::dw_valid_range(g.w, g.q, g.st_w, s * g.dil_w - g.pad_w, lo, hi);
        if (lo < hi) f(oh, ih, r, s, lo, hi);
      }
    }
}

double macs(const math::DwGeom& g, int64_t planes) {
  return static_cast<double>(planes) * g.p * g.q * g.r * g.s;
}

}  // namespace

void depthwise_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                              const Conv2dParams& p) {
  const math::DwGeom g = geom(x, w, y, p);
  const int64_t c = x.size(1), planes = x.size(0) * c;
  dispatch_float(x.dtype(), op_name::depthwise_conv2d, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = y.data<T>();
#pragma omp parallel for if (macs(g, planes) > kParallelMin) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* xp = px + pl * g.h * g.w;
      const T* f = pw + pl % c * g.r * g.s;
      T* yp = py + pl * g.p * g.q;
      const T bias = pb ? pb[pl % c] : T(0);
      for (int64_t i = 0; i < g.p * g.q; ++i) yp[i] = bias;
      for_taps(g, [&](int64_t oh, int64_t ih, int64_t r, int64_t s, int64_t lo, int64_t hi) {
        const T fv = f[r * g.s + s];
        const T* xr = xp + ih * g.w;
        const int64_t off = s * g.dil_w - g.pad_w;  // the tap reads column ow st + off
        T* yr = yp + oh * g.q;
        if (g.st_w == 1)
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += fv * xr[ow + off];
        else
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += fv * xr[ow * g.st_w + off];
      });
    }
  });
}

void depthwise_conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx,
                                    const Conv2dParams& p) {
  const math::DwGeom g = geom(dx, w, dy, p);
  const int64_t c = dx.size(1), planes = dx.size(0) * c;
  dispatch_float(dy.dtype(), "depthwise_conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* pw = w.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for if (macs(g, planes) > kParallelMin) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* dyp = pdy + pl * g.p * g.q;
      const T* f = pw + pl % c * g.r * g.s;
      T* dxp = pdx + pl * g.h * g.w;
      std::memset(dxp, 0, sizeof(T) * g.h * g.w);
      for_taps(g, [&](int64_t oh, int64_t ih, int64_t r, int64_t s, int64_t lo, int64_t hi) {
        const T fv = f[r * g.s + s];
        T* xr = dxp + ih * g.w;
        const int64_t off = s * g.dil_w - g.pad_w;
        const T* yr = dyp + oh * g.q;
        if (g.st_w == 1)
          for (int64_t ow = lo; ow < hi; ++ow) xr[ow + off] += fv * yr[ow];
        else
          for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.st_w + off] += fv * yr[ow];
      });
    }
  });
}

void depthwise_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                                       const Conv2dParams& p) {
  const math::DwGeom g = geom(x, dw, dy, p);
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "depthwise_conv2d_backward_weights", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdw = dw.data<T>();
    T* pdb = db.defined() ? db.data<T>() : nullptr;
#pragma omp parallel for if (macs(g, n * c) > kParallelMin) schedule(static)
    for (int64_t ch = 0; ch < c; ++ch) {
      T* f = pdw + ch * g.r * g.s;
      for (int64_t t = 0; t < g.r * g.s; ++t) f[t] = 0;
      T bias = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* xp = px + (i * c + ch) * g.h * g.w;
        const T* dyp = pdy + (i * c + ch) * g.p * g.q;
        for_taps(g, [&](int64_t oh, int64_t ih, int64_t r, int64_t s, int64_t lo, int64_t hi) {
          const T* xr = xp + ih * g.w;
          const int64_t off = s * g.dil_w - g.pad_w;
          const T* yr = dyp + oh * g.q;
          T acc = 0;
          if (g.st_w == 1) {
#pragma omp simd reduction(+ : acc)
            for (int64_t ow = lo; ow < hi; ++ow) acc += yr[ow] * xr[ow + off];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) acc += yr[ow] * xr[ow * g.st_w + off];
          }
          f[r * g.s + s] += acc;
        });
        if (pdb) {
#pragma omp simd reduction(+ : bias)
          for (int64_t k = 0; k < g.p * g.q; ++k) bias += dyp[k];
        }
      }
      if (pdb) pdb[ch] = bias;
    }
  });
}

}  // namespace hpcnet::cpu
