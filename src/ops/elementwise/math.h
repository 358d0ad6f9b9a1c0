// The per-element (and per-row) arithmetic of hpcnet's own kernels, written once as
// __host__ __device__ inline functions: the CPU loops (src/ops/cpu/) and the CUDA kernels
// (src/ops/cuda/) call these same functions, so the CPU tests exercise the arithmetic the GPU
// runs. Plain C++ when compiled by a host compiler; no CUDA headers needed.
// Invariants: no allocation, no exceptions, no I/O; T is float or double; sums over a row
// accumulate in double, as the CPU kernels always have.
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define HPCNET_HD __host__ __device__ __forceinline__
#else
#define HPCNET_HD inline
#endif

namespace hpcnet::math {

// exp/sqrt/log with the precision of the argument (expf for float, exp for double), on both
// sides.
HPCNET_HD float exp_t(float x) { return ::expf(x); }
HPCNET_HD double exp_t(double x) { return ::exp(x); }
HPCNET_HD float sqrt_t(float x) { return ::sqrtf(x); }
HPCNET_HD double sqrt_t(double x) { return ::sqrt(x); }
HPCNET_HD double log_d(double x) { return ::log(x); }

// ---- relu, add, scale ----

// y = max(x, 0); NaN gives 0 (`x > 0` is false for NaN), as the CPU kernels always did.
template <class T>
HPCNET_HD T relu(T x) {
  return x > T(0) ? x : T(0);
}
// dx = dy where the forward output y > 0, else 0.
template <class T>
HPCNET_HD T relu_grad(T dy, T y) {
  return y > T(0) ? dy : T(0);
}
template <class T>
HPCNET_HD T add(T a, T b) {
  return a + b;
}
template <class T>
HPCNET_HD T scale(T x, T s) {
  return x * s;
}
// y = x + b, then relu when asked (the unfused bias epilogue of conv2d / linear).
template <class T>
HPCNET_HD T bias_act(T x, T b, bool relu_on) {
  T v = x + b;
  return relu_on ? relu(v) : v;
}

// ---- silu, sigmoid, mul ----

// 1 / (1 + e^-x), in the argument's precision (exp of a large -x gives inf and the result 0).
template <class T>
HPCNET_HD T sigmoid(T x) {
  return T(1) / (T(1) + exp_t(-x));
}
// dx = dy y (1 - y), y the forward output.
template <class T>
HPCNET_HD T sigmoid_grad(T dy, T y) {
  return dy * y * (T(1) - y);
}
// x sigmoid(x) (torch.nn.SiLU).
template <class T>
HPCNET_HD T silu(T x) {
  return x * sigmoid(x);
}
// dx = dy s (1 + x (1 - s)), s = sigmoid(x) of the forward input x.
template <class T>
HPCNET_HD T silu_grad(T dy, T x) {
  T s = sigmoid(x);
  return dy * s * (T(1) + x * (T(1) - s));
}
template <class T>
HPCNET_HD T mul(T a, T b) {
  return a * b;
}

// ---- max pooling ----

// The window geometry of a 2-d max pool over one (H, W) plane.
struct PoolGeom {
  int64_t H, W;    // input plane
  int64_t kh, kw;  // window
  int64_t sh, sw;  // stride
  int64_t ph, pw;  // padding
};

// Maximum of the window of output (oh, ow) over plane xp: writes the value to best and its
// position ih * W + iw to at (-1, with best = -inf, when the window saw only padding). Ties keep
// the first position in scan order; a NaN wins wherever it is (the last one seen), as in torch.
template <class T>
HPCNET_HD void pool_window_max(const T* xp, const PoolGeom& g, int64_t oh, int64_t ow, T& best,
                               int64_t& at) {
  best = -static_cast<T>(INFINITY);
  at = -1;
  for (int64_t r = 0; r < g.kh; ++r) {
    int64_t ih = oh * g.sh - g.ph + r;
    if (ih < 0 || ih >= g.H) continue;
    for (int64_t t = 0; t < g.kw; ++t) {
      int64_t iw = ow * g.sw - g.pw + t;
      if (iw < 0 || iw >= g.W) continue;
      T v = xp[ih * g.W + iw];
      if (at < 0 || v > best || v != v) best = v, at = ih * g.W + iw;
    }
  }
}

// The windows along one axis that cover input index i: outputs o in [lo, hi] (empty when
// lo > hi) with o * stride - pad <= i < o * stride - pad + k, clipped to [0, out).
HPCNET_HD void pool_windows_covering(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out,
                                     int64_t& lo, int64_t& hi) {
  int64_t first = i + pad - k + 1;  // o * stride >= first
  lo = first > 0 ? (first + stride - 1) / stride : 0;
  hi = (i + pad) / stride;
  if (hi > out - 1) hi = out - 1;
}

// The gradient of input (ih, iw) of one plane: the sum of the output gradients dyp (P, Q) whose
// recorded maximum position ap (P, Q) is this input, over the covering windows in row-major
// order (the order in which a scatter over outputs would add them).
template <class T>
HPCNET_HD T pool_grad_gather(const T* dyp, const int32_t* ap, const PoolGeom& g, int64_t P,
                             int64_t Q, int64_t ih, int64_t iw) {
  int64_t oh0, oh1, ow0, ow1;
  pool_windows_covering(ih, g.kh, g.sh, g.ph, P, oh0, oh1);
  pool_windows_covering(iw, g.kw, g.sw, g.pw, Q, ow0, ow1);
  const int64_t pos = ih * g.W + iw;
  T acc = T(0);
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow)
      if (ap[oh * Q + ow] == pos) acc += dyp[oh * Q + ow];
  return acc;
}

// ---- softmax family, one row of (N, C) ----

// y = x - logsumexp(x) over one row of c values (y must not alias x).
template <class T>
HPCNET_HD void log_softmax_row(const T* x, T* y, int64_t c) {
  T mx = x[0];
  for (int64_t j = 1; j < c; ++j) mx = x[j] > mx ? x[j] : mx;
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += exp_t(static_cast<double>(x[j] - mx));
  T lse = static_cast<T>(log_d(s)) + mx;
  for (int64_t j = 0; j < c; ++j) y[j] = x[j] - lse;
}

// dx = dy - exp(y) * sum(dy) over one row.
template <class T>
HPCNET_HD void log_softmax_backward_row(const T* dy, const T* y, T* dx, int64_t c) {
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += dy[j];
  for (int64_t j = 0; j < c; ++j) dx[j] = dy[j] - static_cast<T>(exp_t(y[j]) * s);
}

// One row of the fused cross entropy with label smoothing eps and target t (in range): writes
// the softmax probabilities to prob and returns the row's loss
//   -(1 - eps) logp[t] - eps / c * sum(logp).
template <class T>
HPCNET_HD double cross_entropy_row(const T* x, T* prob, int64_t c, int64_t t, double eps) {
  log_softmax_row(x, prob, c);
  double row = -(1.0 - eps) * prob[t];
  if (eps != 0) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += prob[j];
    row -= eps / c * s;
  }
  for (int64_t j = 0; j < c; ++j) prob[j] = static_cast<T>(exp_t(prob[j]));
  return row;
}

// The weights of cross_entropy's target distribution: on at the target, off elsewhere.
struct SmoothedTarget {
  double on, off;
};
HPCNET_HD SmoothedTarget smoothed_target(double eps, int64_t c) {
  return {1.0 - eps + eps / c, eps / c};
}

// dlogits = g * (prob - target weight), with g = dloss / N.
template <class T>
HPCNET_HD T cross_entropy_grad(T g, T prob, bool is_target, T on, T off) {
  return g * (prob - (is_target ? on : off));
}
// The scale of cross_entropy's backward: dloss / N (mean reduction).
template <class T>
HPCNET_HD T cross_entropy_grad_scale(T dloss, int64_t n) {
  return static_cast<T>(dloss / n);
}
// nll_loss backward: dlogp = -dloss / N at the target column, 0 elsewhere.
template <class T>
HPCNET_HD T nll_grad_scale(T dloss, int64_t n) {
  return static_cast<T>(-dloss / n);
}

// ---- cross_entropy2d, one pixel of (N, C, H, W) ----

// One pixel's cross entropy: its c logits lie at x[j * stride] (stride = H W). Writes the softmax
// probabilities to prob[j * stride] (prob must not alias x) and returns -log_softmax(x)[t], or 0
// when t < 0 (an ignored pixel: probabilities only). The arithmetic of log_softmax_row and
// cross_entropy_row (T for the shifted logits, the sum of exponentials in double).
template <class T>
HPCNET_HD double softmax_nll_strided(const T* x, T* prob, int64_t c, int64_t stride, int64_t t) {
  T mx = x[0];
  for (int64_t j = 1; j < c; ++j) mx = x[j * stride] > mx ? x[j * stride] : mx;
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += exp_t(static_cast<double>(x[j * stride] - mx));
  T lse = static_cast<T>(log_d(s)) + mx;
  for (int64_t j = 0; j < c; ++j) prob[j * stride] = static_cast<T>(exp_t(x[j * stride] - lse));
  return t >= 0 ? -static_cast<double>(x[t * stride] - lse) : 0.0;
}

// The scale of a non-ignored pixel's gradient in cross_entropy2d: dloss * w[t] / total_weight
// (the mean over weights); dlogits = scale * (prob - onehot) there, 0 on ignored pixels.
template <class T>
HPCNET_HD T cross_entropy2d_grad_scale(T dloss, double w, double total_weight) {
  return static_cast<T>(static_cast<double>(dloss) * w / total_weight);
}

// Dice loss (smp's multiclass DiceLoss): from the per-class sums over counted pixels, I = sum p
// [t = c], P = sum p, Tn = count(t = c), class weight w and W = the sum of the weights, the
// class's loss term and the two coefficients of its gradient, dL/dp_c = a [t = c] + b:
//   D = max((P + Tn) / 2 + smooth, eps),  loss_c = w [Tn > 0] (1 - (I + smooth) / D) / W
//   a = -w [Tn > 0] / (W D),  b = w [Tn > 0] (I + smooth) / (2 W D^2) (0 where D is clamped).
HPCNET_HD double dice_class_terms(double I, double P, double Tn, double w, double W, double smooth,
                                  double eps, double& a, double& b) {
  const double raw = 0.5 * (P + Tn) + smooth;
  const double D = raw > eps ? raw : eps;
  const double f = Tn > 0 ? w / W : 0.0;
  a = -f / D;
  b = raw >= eps ? 0.5 * f * (I + smooth) / (D * D) : 0.0;
  return f * (1.0 - (I + smooth) / D);
}

// One counted pixel's dice gradient over its c classes at stride hw: g_j = dloss (a_j [t = j] +
// b_j), dlogits_j = p_j (g_j - sum_k p_k g_k) (through the softmax). coef holds a (c) then b (c).
template <class T>
HPCNET_HD void dice_grad_pixel(const T* prob, T* dx, int64_t c, int64_t hw, int64_t t,
                               const double* coef, double dloss) {
  double dot = 0;
  for (int64_t j = 0; j < c; ++j)
    dot += static_cast<double>(prob[j * hw]) * (coef[c + j] + (j == t ? coef[j] : 0.0));
  for (int64_t j = 0; j < c; ++j) {
    const double g = coef[c + j] + (j == t ? coef[j] : 0.0);
    dx[j * hw] = static_cast<T>(dloss * static_cast<double>(prob[j * hw]) * (g - dot));
  }
}

// ---- upsample_nearest2d ----

// The gradient of input (i, j) of one plane under nearest upsampling by s: the sum of the s x s
// block dyp[i s + a, j s + b] of the upsampled plane dyp (width w s), rows a outer and columns b
// inner (the order in which PyTorch's scatter over outputs adds them), in T.
template <class T>
HPCNET_HD T upsample_nearest_grad(const T* dyp, int64_t w, int64_t s, int64_t i, int64_t j) {
  const int64_t ws = w * s;
  const T* p = dyp + i * s * ws + j * s;
  T acc = T(0);
  for (int64_t a = 0; a < s; ++a)
    for (int64_t b = 0; b < s; ++b) acc += p[a * ws + b];
  return acc;
}

// ---- bilinear resampling (torch's interpolate(mode="bilinear")), one axis at a time ----

// The two taps of output index dst along an axis of `in` input and `out` output samples:
// inputs i0 and i1 (= i0, or i0 + 1 below the last) with weights 1 - l1 and l1. The source
// coordinate is torch's area_pixel_compute_source_index: align_corners maps the corner samples
// onto each other, src = dst (in - 1) / (out - 1) (0 when out == 1); otherwise pixel centres,
// src = (dst + 0.5) in / out - 0.5, clamped at 0. Computed in T, as torch's CPU kernel.
template <class T>
HPCNET_HD void linear_taps(int64_t dst, int64_t in, int64_t out, bool align_corners, int64_t& i0,
                           int64_t& i1, T& l1) {
  T src;
  if (align_corners) {
    src = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) * static_cast<T>(dst) : T(0);
  } else {
    src = static_cast<T>(in) / static_cast<T>(out) * (static_cast<T>(dst) + T(0.5)) - T(0.5);
    if (src < T(0)) src = T(0);
  }
  i0 = static_cast<int64_t>(src);
  if (i0 > in - 1) i0 = in - 1;
  i1 = i0 < in - 1 ? i0 + 1 : i0;
  l1 = src - static_cast<T>(i0);
  l1 = l1 < T(0) ? T(0) : (l1 > T(1) ? T(1) : l1);
}

// The weight of input i in output dst along one axis (0 when dst does not read i).
template <class T>
HPCNET_HD T linear_weight(int64_t dst, int64_t i, int64_t in, int64_t out, bool align_corners) {
  int64_t i0, i1;
  T l1;
  linear_taps(dst, in, out, align_corners, i0, i1, l1);
  T w = T(0);
  if (i0 == i) w += T(1) - l1;
  if (i1 == i) w += l1;
  return w;
}

// The outputs [lo, hi) along one axis that may read input i (a few more at the ends, whose
// weight is 0): the inverse map of linear_taps, widened by one input step and two samples.
HPCNET_HD void linear_readers(int64_t i, int64_t in, int64_t out, bool align_corners, int64_t& lo,
                              int64_t& hi) {
  double step, c;  // outputs per input, and the output at input i's position
  if (align_corners) {
    if (in <= 1 || out <= 1) {
      lo = 0, hi = out;
      return;
    }
    step = static_cast<double>(out - 1) / static_cast<double>(in - 1);
    c = static_cast<double>(i) * step;
  } else {
    step = static_cast<double>(out) / static_cast<double>(in);
    c = (static_cast<double>(i) + 0.5) * step - 0.5;
  }
  const int64_t half = static_cast<int64_t>(step) + 2, at = static_cast<int64_t>(c);
  lo = at - half > 0 ? at - half : 0;
  hi = at + half + 1 < out ? at + half + 1 : out;
}

// Output (oy, ox) of a bilinear resampling of plane xp (h, w) to (oh, ow).
template <class T>
HPCNET_HD T bilinear_sample(const T* xp, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t oy,
                            int64_t ox, bool align_corners) {
  int64_t y0, y1, x0, x1;
  T ly, lx;
  linear_taps(oy, h, oh, align_corners, y0, y1, ly);
  linear_taps(ox, w, ow, align_corners, x0, x1, lx);
  return (T(1) - ly) * ((T(1) - lx) * xp[y0 * w + x0] + lx * xp[y0 * w + x1]) +
         ly * ((T(1) - lx) * xp[y1 * w + x0] + lx * xp[y1 * w + x1]);
}

// The gradient of input (iy, ix) of one plane: the sum over the outputs that read it of their
// gradient dyp (oh, ow) times its weight, gathered in row-major output order (so every backend
// adds the same terms in the same order and gets the same bits).
template <class T>
HPCNET_HD T bilinear_grad(const T* dyp, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t iy,
                          int64_t ix, bool align_corners) {
  int64_t ylo, yhi, xlo, xhi;
  linear_readers(iy, h, oh, align_corners, ylo, yhi);
  linear_readers(ix, w, ow, align_corners, xlo, xhi);
  T acc = T(0);
  for (int64_t oy = ylo; oy < yhi; ++oy) {
    const T wy = linear_weight<T>(oy, iy, h, oh, align_corners);
    if (wy == T(0)) continue;
    T row = T(0);
    for (int64_t ox = xlo; ox < xhi; ++ox) {
      const T wx = linear_weight<T>(ox, ix, w, ow, align_corners);
      if (wx != T(0)) row += wx * dyp[oy * ow + ox];
    }
    acc += wy * row;
  }
  return acc;
}

// Index of the first maximum of a row (NaN never wins over a number seen before it).
template <class T>
HPCNET_HD int64_t argmax_row(const T* p, int64_t c) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; ++j)
    if (p[j] > p[best]) best = j;
  return best;
}

// ---- batch normalisation, one channel ----

// A channel's statistics in double: mean, biased variance and 1 / sqrt(var + eps).
struct BnStats {
  double mean, var, invstd;
};

// Training: from the shifted sums s1 = sum(x - shift), s2 = sum((x - shift)^2) over m values.
HPCNET_HD BnStats bn_batch_stats(double s1, double s2, double shift, double m, double eps) {
  double dm = s1 / m;
  double var = fmax(s2 / m - dm * dm, 0.0);
  return {dm + shift, var, 1.0 / ::sqrt(var + eps)};
}

// Eval: from the running statistics.
HPCNET_HD BnStats bn_running_stats(double running_mean, double running_var, double eps) {
  return {running_mean, running_var, 1.0 / ::sqrt(running_var + eps)};
}

// torch's running-statistics update after a training batch of m values (variance unbiased);
// either pointer may be null.
template <class T>
HPCNET_HD void bn_update_running(T* rm, T* rv, const BnStats& s, double m, double momentum) {
  if (rm) *rm = static_cast<T>((1 - momentum) * *rm + momentum * s.mean);
  if (rv) {
    double unbiased = m > 1 ? s.var * m / (m - 1) : s.var;
    *rv = static_cast<T>((1 - momentum) * *rv + momentum * unbiased);
  }
}

// The forward map y = x * a + b, a = invstd * w, b = bias - mean * a (w, bias null: 1, 0).
template <class T>
struct BnAffine {
  T a, b;
};
template <class T>
HPCNET_HD BnAffine<T> bn_affine(const BnStats& s, const T* w, const T* bias) {
  double wa = w ? static_cast<double>(*w) : 1.0;
  return {static_cast<T>(s.invstd * wa),
          static_cast<T>((bias ? static_cast<double>(*bias) : 0.0) - s.mean * s.invstd * wa)};
}

// The backward map dx = k g + c0 + c1 (x - mean) from sum_g = sum(g) and
// sum_gx = sum(g (x - mean)) over m values:
//   training: dx = w invstd (g - sum_g / m - (x - mean) invstd^2 sum_gx / m)
//   eval:     dx = w invstd g
template <class T>
struct BnBackward {
  T k, c0, c1;
};
template <class T>
HPCNET_HD BnBackward<T> bn_backward_coeffs(const T* w, double invstd, double sum_g, double sum_gx,
                                           double m, bool training) {
  double wv = w ? static_cast<double>(*w) : 1.0;
  return {static_cast<T>(wv * invstd), training ? static_cast<T>(-wv * invstd * sum_g / m) : T(0),
          training ? static_cast<T>(-wv * invstd * invstd * invstd * sum_gx / m) : T(0)};
}

// ---- SGD ----

// torch.optim.SGD's coefficients for one call, in the parameters' type.
template <class T>
struct SgdCoeffs {
  T lr, wd, mom, damp;  // damp = 1 - dampening
  bool momentum;        // momentum != 0: buffers are used
  bool first;           // buffers start as the (decayed) gradient
  bool nesterov;
};

// One element of the update, exactly in torch's order:
//   d = g + wd * p;  m = first ? d : mom * b + damp * d;  b = m;
//   p -= lr * (nesterov ? d + mom * m : m)      (without momentum: p -= lr * d)
template <class T>
HPCNET_HD void sgd_element(T& p, T g, T* b, const SgdCoeffs<T>& c) {
  if (!c.momentum) {
    p -= c.lr * (g + c.wd * p);
    return;
  }
  T d = g + c.wd * p;
  T m = c.first ? d : c.mom * *b + c.damp * d;
  *b = m;
  p -= c.lr * (c.nesterov ? d + c.mom * m : m);
}

// ---- AdamW and the EMA of weights ----

// torch.optim.AdamW's coefficients for one step t (from 1), in the parameters' type; the bias
// corrections 1 - beta^t are taken in double.
template <class T>
struct AdamWCoeffs {
  T decay;         // 1 - lr * weight_decay
  T b1, b2;        // beta1, beta2
  T step_size;     // lr / (1 - beta1^t)
  T inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  T eps;
};
template <class T>
inline AdamWCoeffs<T> adamw_coeffs(double lr, double beta1, double beta2, double eps,
                                   double weight_decay, int64_t step) {
  const double bc1 = 1 - ::pow(beta1, static_cast<double>(step));
  const double bc2 = 1 - ::pow(beta2, static_cast<double>(step));
  return {static_cast<T>(1 - lr * weight_decay),
          static_cast<T>(beta1),
          static_cast<T>(beta2),
          static_cast<T>(lr / bc1),
          static_cast<T>(1 / ::sqrt(bc2)),
          static_cast<T>(eps)};
}

// One element:  p *= decay;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//               p -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
template <class T>
HPCNET_HD void adamw_element(T& p, T g, T& m, T& v, const AdamWCoeffs<T>& c) {
  p *= c.decay;
  m = c.b1 * m + (1 - c.b1) * g;
  v = c.b2 * v + (1 - c.b2) * g * g;
  p -= c.step_size * m / (sqrt_t(v) * c.inv_sqrt_bc2 + c.eps);
}

// a += w (b - a), torch.lerp_: one element of the EMA update.
template <class T>
HPCNET_HD void lerp(T& a, T b, T w) {
  a += w * (b - a);
}

}  // namespace hpcnet::math
