// CPU batch normalisation over NCHW, one channel per task (OpenMP over channels): the statistics
// of a channel are a reduction over its N contiguous H*W planes. Forward is two passes over x
// (statistics, then the normalised, affine, residual-added and optionally rectified output);
// backward is two passes over g and x (the two channel sums, then dx). Sums are taken relative
// to a per-channel shift (the channel's first element) in float within a plane and in double
// across planes, so a large mean does not cancel the variance away.
#include <cmath>

#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/float_dispatch.h"

namespace hpcnet::cpu {
namespace {

struct BnDims {
  int64_t n, c, hw;
};

BnDims bn_dims(const Tensor& x) { return {x.size(0), x.size(1), x.size(2) * x.size(3)}; }

template <class T>
const T* opt_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Sum of (x - shift) and of its square over one channel.
template <class T>
void channel_moments(const T* x, const BnDims& d, int64_t c, T shift, double& s1, double& s2) {
  s1 = s2 = 0;
  for (int64_t n = 0; n < d.n; ++n) {
    const T* p = x + (n * d.c + c) * d.hw;
    T a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < d.hw; ++i) {
      T v = p[i] - shift;
      a += v;
      b += v * v;
    }
    s1 += a;
    s2 += b;
  }
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, Tensor& running_mean, Tensor& running_var,
                        Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                        const BatchNormParams& p) {
  dispatch_float(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    BnDims d = bn_dims(x);
    const T* px = x.data<T>();
    const T* pw = opt_data<T>(weight);
    const T* pb = opt_data<T>(bias);
    const T* pr = opt_data<T>(residual);
    T* rm = running_mean.defined() ? running_mean.data<T>() : nullptr;
    T* rv = running_var.defined() ? running_var.data<T>() : nullptr;
    T* py = y.data<T>();
    T* sm = save_mean.data<T>();
    T* si = save_invstd.data<T>();
    const double m = static_cast<double>(d.n * d.hw);
    const bool relu = p.relu;
#pragma omp parallel for schedule(static) if (d.n * d.c * d.hw > (1 << 15))
    for (int64_t c = 0; c < d.c; ++c) {
      double mean, invstd;
      if (p.training) {
        T shift = px[c * d.hw];
        double s1, s2;
        channel_moments(px, d, c, shift, s1, s2);
        double dm = s1 / m;
        double var = std::max(s2 / m - dm * dm, 0.0);
        mean = dm + shift;
        invstd = 1.0 / std::sqrt(var + p.eps);
        if (rm) rm[c] = static_cast<T>((1 - p.momentum) * rm[c] + p.momentum * mean);
        if (rv) {
          double unbiased = m > 1 ? var * m / (m - 1) : var;
          rv[c] = static_cast<T>((1 - p.momentum) * rv[c] + p.momentum * unbiased);
        }
      } else {
        mean = rm[c];
        invstd = 1.0 / std::sqrt(static_cast<double>(rv[c]) + p.eps);
      }
      sm[c] = static_cast<T>(mean);
      si[c] = static_cast<T>(invstd);
      // y = x * a + b (+ residual), a = invstd * w, b = bias - mean * a.
      double wa = pw ? static_cast<double>(pw[c]) : 1.0;
      T a = static_cast<T>(invstd * wa);
      T b = static_cast<T>((pb ? static_cast<double>(pb[c]) : 0.0) - mean * invstd * wa);
      for (int64_t n = 0; n < d.n; ++n) {
        int64_t off = (n * d.c + c) * d.hw;
        const T* xi = px + off;
        T* yi = py + off;
        if (pr) {
          const T* ri = pr + off;
#pragma omp simd
          for (int64_t i = 0; i < d.hw; ++i) {
            T v = xi[i] * a + b + ri[i];
            yi[i] = relu ? (v > 0 ? v : T(0)) : v;
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < d.hw; ++i) {
            T v = xi[i] * a + b;
            yi[i] = relu ? (v > 0 ? v : T(0)) : v;
          }
        }
      }
    }
  });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                         const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                         Tensor& dweight, Tensor& dbias, const BatchNormParams& p) {
  dispatch_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    BnDims d = bn_dims(x);
    const T* pg = g.data<T>();
    const T* px = x.data<T>();
    const T* pw = opt_data<T>(weight);
    const T* sm = save_mean.data<T>();
    const T* si = save_invstd.data<T>();
    T* pdx = dx.defined() ? dx.data<T>() : nullptr;
    T* pdw = dweight.defined() ? dweight.data<T>() : nullptr;
    T* pdb = dbias.defined() ? dbias.data<T>() : nullptr;
    const double m = static_cast<double>(d.n * d.hw);
#pragma omp parallel for schedule(static) if (d.n * d.c * d.hw > (1 << 15))
    for (int64_t c = 0; c < d.c; ++c) {
      const T mean = sm[c];
      const double invstd = si[c];
      double sum_g = 0, sum_gx = 0;  // sum(g), sum(g * (x - mean))
      for (int64_t n = 0; n < d.n; ++n) {
        int64_t off = (n * d.c + c) * d.hw;
        const T* gi = pg + off;
        const T* xi = px + off;
        T a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < d.hw; ++i) {
          a += gi[i];
          b += gi[i] * (xi[i] - mean);
        }
        sum_g += a;
        sum_gx += b;
      }
      if (pdw) pdw[c] = static_cast<T>(sum_gx * invstd);
      if (pdb) pdb[c] = static_cast<T>(sum_g);
      if (!pdx) continue;
      double w = pw ? static_cast<double>(pw[c]) : 1.0;
      // training: dx = w invstd (g - sum_g / m - (x - mean) invstd^2 sum_gx / m)
      // eval:     dx = w invstd g
      T k = static_cast<T>(w * invstd);
      T c0 = p.training ? static_cast<T>(-w * invstd * sum_g / m) : T(0);
      T c1 = p.training ? static_cast<T>(-w * invstd * invstd * invstd * sum_gx / m) : T(0);
      for (int64_t n = 0; n < d.n; ++n) {
        int64_t off = (n * d.c + c) * d.hw;
        const T* gi = pg + off;
        const T* xi = px + off;
        T* di = pdx + off;
#pragma omp simd
        for (int64_t i = 0; i < d.hw; ++i) di[i] = k * gi[i] + c0 + c1 * (xi[i] - mean);
      }
    }
  });
}

}  // namespace hpcnet::cpu
