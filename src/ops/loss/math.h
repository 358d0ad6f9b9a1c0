// The per-row (and per-pixel) arithmetic of the softmax losses (log_softmax, nll, cross_entropy,
// cross_entropy2d, dice) and argmax, shared by the CPU loops and the CUDA kernels
// (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double; sums over a row
// accumulate in double, as the CPU kernels always have.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

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

// Index of the first maximum of a row (NaN never wins over a number seen before it).
template <class T>
HPCNET_HD int64_t argmax_row(const T* p, int64_t c) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; ++j)
    if (p[j] > p[best]) best = j;
  return best;
}

}  // namespace hpcnet::math
