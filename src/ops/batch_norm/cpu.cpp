// CPU batch normalisation over NCHW, one channel per task (OpenMP over channels): the statistics
// of a channel are a reduction over its N contiguous H*W planes. Forward is two passes over x
// (statistics, then the normalised, affine, residual-added and optionally rectified output);
// backward is two passes over g and x (the two channel sums, then dx).
// The training forward is computed in double from the float values, as exact arithmetic would:
// the sums about each channel's first value, and y = (x - mean) a + b with one rounding (eval
// keeps y = x a + b in T with a = invstd w, b = bias - mean a: the folded form predict uses).
// float32 there lost digits in proportion to |mean| / std and left yolov8m's training-mode
// gradients 20x less accurate than PyTorch's (tests/nn/models/test_yolo_scales_golden.cpp).
#include <algorithm>
#include <vector>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/batch_norm/math.h"

namespace hpcnet::cpu {
namespace {

struct BnDims {
  int64_t n, c, hw;
};

BnDims bn_dims(const Tensor& x) { return {x.size(0), x.size(1), x.size(2) * x.size(3)}; }

template <class T>
T* opt_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The forward's tensors as typed pointers (null where an optional tensor is undefined).
template <class T>
struct BnForwardPtrs {
  const T *x, *w, *b, *r;
  T *rm, *rv, *y, *sm, *si;
  BnForwardPtrs(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Tensor& r_,
                Tensor& rm_, Tensor& rv_, Tensor& y_, Tensor& sm_, Tensor& si_)
      : x(x_.data<T>()), w(opt_data<T>(w_)), b(opt_data<T>(b_)), r(opt_data<T>(r_)),
        rm(opt_data<T>(rm_)), rv(opt_data<T>(rv_)), y(y_.data<T>()), sm(sm_.data<T>()),
        si(si_.data<T>()) {}
};

// The backward's tensors as typed pointers.
template <class T>
struct BnBackwardPtrs {
  const T *g, *x, *w, *sm, *si;
  T *dx, *dw, *db;
  BnBackwardPtrs(const Tensor& g_, const Tensor& x_, const Tensor& w_, const Tensor& sm_,
                 const Tensor& si_, Tensor& dx_, Tensor& dw_, Tensor& db_)
      : g(g_.data<T>()), x(x_.data<T>()), w(opt_data<T>(w_)), sm(sm_.data<T>()),
        si(si_.data<T>()), dx(opt_data<T>(dx_)), dw(opt_data<T>(dw_)), db(opt_data<T>(db_)) {}
};

// One channel's normalisation from its shifted sums s1 = sum(x - shift), s2 = sum((x - shift)^2)
// over m values (training; running stats updated as torch does) or from the running stats (eval):
// records save_mean / save_invstd and returns the map y = (x - m) * a + b (in double).
template <class T>
math::BnAffine<double> channel_affine(int64_t c, double s1, double s2, double shift, double m,
                                 const BnForwardPtrs<T>& t, const BatchNormParams& p) {
  math::BnStats st;
  if (p.training) {
    st = math::bn_batch_stats(s1, s2, shift, m, p.eps);
    math::bn_update_running(t.rm ? t.rm + c : nullptr, t.rv ? t.rv + c : nullptr, st, m,
                            p.momentum);
  } else {
    st = math::bn_running_stats(t.rm[c], t.rv[c], p.eps);
  }
  t.sm[c] = static_cast<T>(st.mean);
  t.si[c] = static_cast<T>(st.invstd);
  // training: y = (x - mean) a + b in double, a = invstd w, b = bias; eval: m = 0 and a, b of
  // the folded form rounded to T.
  const double wa = t.w ? static_cast<double>(t.w[c]) : 1.0;
  const double b = t.b ? static_cast<double>(t.b[c]) : 0.0;
  if (p.training) return {st.mean, st.invstd * wa, b};
  return {0.0, static_cast<double>(static_cast<T>(st.invstd * wa)),
          static_cast<double>(static_cast<T>(b - st.mean * st.invstd * wa))};
}

// Sum of (x - shift) and of its square over one channel, in double.
template <class T>
void channel_moments(const T* x, const BnDims& d, int64_t c, double shift, double& s1, double& s2) {
  s1 = s2 = 0;
  for (int64_t n = 0; n < d.n; ++n) {
    const T* p = x + (n * d.c + c) * d.hw;
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < d.hw; ++i) {
      double v = static_cast<double>(p[i]) - shift;
      a += v;
      b += v * v;
    }
    s1 += a;
    s2 += b;
  }
}

// ---- nChw16c (Layout::kBlocked16): 16 channels per vector, threads over (n, channel block) ----

// Per-channel sums of a(x) and b(x) over N, H, W in the blocked layout: f(off, c, a, b) adds one
// element's contributions; partial sums per thread in Acc per run of 32 pixels, double across.
template <class T, class Acc = T, class F>
void blocked_channel_sums(const BnDims& d, std::vector<double>& s1, std::vector<double>& s2,
                          F&& f) {
  const int64_t cb = d.c / 16;
  s1.assign(d.c, 0.0);
  s2.assign(d.c, 0.0);
#pragma omp parallel if (d.n * d.c * d.hw > (1 << 15))
  {
    std::vector<double> l1(d.c, 0.0), l2(d.c, 0.0);
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t b = 0; b < cb; ++b) {
        // float sums over runs of 32 pixels, then double: a plane of 1024 pixels summed in one
        // float per channel loses digits when g * (x - mean) cancels.
        const int64_t base = (n * cb + b) * d.hw * 16;
        for (int64_t p0 = 0; p0 < d.hw; p0 += 32) {
          Acc a[16] = {}, q[16] = {};
          const int64_t p1 = std::min<int64_t>(p0 + 32, d.hw);
          for (int64_t p = p0; p < p1; ++p) {
#pragma omp simd
            for (int64_t l = 0; l < 16; ++l) f(base + p * 16 + l, b * 16 + l, a[l], q[l]);
          }
          for (int64_t l = 0; l < 16; ++l) {
            l1[b * 16 + l] += a[l];
            l2[b * 16 + l] += q[l];
          }
        }
      }
#pragma omp critical
    for (int64_t c = 0; c < d.c; ++c) {
      s1[c] += l1[c];
      s2[c] += l2[c];
    }
  }
}

// out[off] = f(off, c) over the blocked tensor.
template <class F>
void blocked_map(const BnDims& d, F&& f) {
  const int64_t cb = d.c / 16;
#pragma omp parallel for collapse(2) schedule(static) if (d.n * d.c * d.hw > (1 << 15))
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t b = 0; b < cb; ++b) {
      const int64_t base = (n * cb + b) * d.hw * 16;
      for (int64_t p = 0; p < d.hw; ++p) {
#pragma omp simd
        for (int64_t l = 0; l < 16; ++l) f(base + p * 16 + l, b * 16 + l);
      }
    }
}

template <class T>
void bn_forward_blocked(const BnDims& d, const BnForwardPtrs<T>& t, const BatchNormParams& p) {
  const T* px = t.x;
  const T* pr = t.r;
  T* py = t.y;
  const double m = static_cast<double>(d.n * d.hw);
  std::vector<double> shift(d.c), mm(d.c), a(d.c), b(d.c);
  if (d.n * d.hw > 0)  // an empty batch (eval) has no first value to read
    for (int64_t c = 0; c < d.c; ++c) shift[c] = px[(c / 16) * d.hw * 16 + c % 16];  // n = 0, p = 0
  std::vector<double> s1, s2;
  if (p.training) {
    const double* sh = shift.data();
    blocked_channel_sums<T, double>(d, s1, s2, [&](int64_t off, int64_t c, double& u, double& v) {
      double t = static_cast<double>(px[off]) - sh[c];
      u += t;
      v += t * t;
    });
  }
  for (int64_t c = 0; c < d.c; ++c) {
    auto af = channel_affine<T>(c, p.training ? s1[c] : 0.0, p.training ? s2[c] : 0.0, shift[c],
                                m, t, p);
    mm[c] = af.m;
    a[c] = af.a;
    b[c] = af.b;
  }
  const double* pm = mm.data();
  const double* pa = a.data();
  const double* pbb = b.data();
  const bool relu = p.relu;
  if (!p.training) {  // y = x a + b in T (see channel_affine)
    std::vector<T> fa(a.begin(), a.end()), fb(b.begin(), b.end());
    const T *qa = fa.data(), *qb = fb.data();
    blocked_map(d, [&](int64_t off, int64_t c) {
      T v = px[off] * qa[c] + qb[c];
      if (pr) v += pr[off];
      py[off] = relu ? (v > 0 ? v : T(0)) : v;
    });
    return;
  }
  blocked_map(d, [&](int64_t off, int64_t c) {
    double v = (static_cast<double>(px[off]) - pm[c]) * pa[c] + pbb[c];
    if (pr) v += pr[off];
    py[off] = static_cast<T>(relu ? (v > 0 ? v : 0.0) : v);
  });
}

template <class T>
void bn_backward_blocked(const BnDims& d, const BnBackwardPtrs<T>& t, const BatchNormParams& p) {
  const T *pg = t.g, *px = t.x, *pw = t.w, *sm = t.sm, *si = t.si;
  T *pdx = t.dx, *pdw = t.dw, *pdb = t.db;
  const double m = static_cast<double>(d.n * d.hw);
  std::vector<double> sum_g, sum_gx;
  blocked_channel_sums<T>(d, sum_g, sum_gx, [&](int64_t off, int64_t c, T& u, T& v) {
    u += pg[off];
    v += pg[off] * (px[off] - sm[c]);
  });
  std::vector<T> k(d.c), c0(d.c), c1(d.c);
  for (int64_t c = 0; c < d.c; ++c) {
    const double invstd = si[c];
    if (pdw) pdw[c] = static_cast<T>(sum_gx[c] * invstd);
    if (pdb) pdb[c] = static_cast<T>(sum_g[c]);
    auto bc = math::bn_backward_coeffs(pw ? pw + c : nullptr, invstd, sum_g[c], sum_gx[c], m,
                                       p.training);
    k[c] = bc.k;
    c0[c] = bc.c0;
    c1[c] = bc.c1;
  }
  if (!pdx) return;
  const T *pk = k.data(), *p0 = c0.data(), *p1 = c1.data();
  blocked_map(d, [&](int64_t off, int64_t c) {
    pdx[off] = pk[c] * pg[off] + p0[c] + p1[c] * (px[off] - sm[c]);
  });
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, Tensor& running_mean, Tensor& running_var,
                        Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                        const BatchNormParams& p) {
  dispatch_float(x.dtype(), op_name::batch_norm, [&](auto tag) {
    using T = decltype(tag);
    const BnDims d = bn_dims(x);
    const BnForwardPtrs<T> t(x, weight, bias, residual, running_mean, running_var, y, save_mean,
                             save_invstd);
    if (x.layout() == Layout::kBlocked16) return bn_forward_blocked<T>(d, t, p);
    const T* px = t.x;
    const T* pr = t.r;
    T* py = t.y;
    const double m = static_cast<double>(d.n * d.hw);
    const bool relu = p.relu;
#pragma omp parallel for schedule(static) if (d.n * d.c * d.hw > (1 << 15))
    for (int64_t c = 0; c < d.c; ++c) {
      // The first value of the channel centres the sums; an empty batch (eval) has none to read.
      double shift = d.n * d.hw > 0 ? px[c * d.hw] : 0.0;
      double s1 = 0, s2 = 0;
      if (p.training) channel_moments(px, d, c, shift, s1, s2);
      // y = (x - m) * a + b (+ residual) in double: m the mean, a = invstd * w, b = bias.
      // Plain variables, not a structured binding: clang 14 cannot capture those in the
      // region that omp simd outlines.
      const math::BnAffine<double> ab = channel_affine<T>(c, s1, s2, shift, m, t, p);
      const double mm = ab.m, a = ab.a, b = ab.b;
      if (!p.training) {  // y = x a + b in T (see channel_affine)
        const T fa = static_cast<T>(a), fb = static_cast<T>(b);
        for (int64_t n = 0; n < d.n; ++n) {
          int64_t off = (n * d.c + c) * d.hw;
          const T* xi = px + off;
          const T* ri = pr ? pr + off : nullptr;
          T* yi = py + off;
#pragma omp simd
          for (int64_t i = 0; i < d.hw; ++i) {
            T v = xi[i] * fa + fb;
            if (ri) v += ri[i];
            yi[i] = relu ? (v > 0 ? v : T(0)) : v;
          }
        }
        continue;
      }
      for (int64_t n = 0; n < d.n; ++n) {
        int64_t off = (n * d.c + c) * d.hw;
        const T* xi = px + off;
        T* yi = py + off;
        if (pr) {
          const T* ri = pr + off;
#pragma omp simd
          for (int64_t i = 0; i < d.hw; ++i) {
            double v = (static_cast<double>(xi[i]) - mm) * a + b + ri[i];
            yi[i] = static_cast<T>(relu ? (v > 0 ? v : 0.0) : v);
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < d.hw; ++i) {
            double v = (static_cast<double>(xi[i]) - mm) * a + b;
            yi[i] = static_cast<T>(relu ? (v > 0 ? v : 0.0) : v);
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
    const BnDims d = bn_dims(x);
    const BnBackwardPtrs<T> t(g, x, weight, save_mean, save_invstd, dx, dweight, dbias);
    if (x.layout() == Layout::kBlocked16) return bn_backward_blocked<T>(d, t, p);
    const T *pg = t.g, *px = t.x, *pw = t.w, *sm = t.sm, *si = t.si;
    T *pdx = t.dx, *pdw = t.dw, *pdb = t.db;
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
      const auto coeffs =
          math::bn_backward_coeffs(pw ? pw + c : nullptr, invstd, sum_g, sum_gx, m, p.training);
      const auto k = coeffs.k, c0 = coeffs.c0, c1 = coeffs.c1;  // not a binding (clang 14)
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
