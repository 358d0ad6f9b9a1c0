// The per-element and per-row arithmetic of the detection losses (src/ops/box/), written once as
// __host__ __device__ functions for the CPU loops and the CUDA kernels, like every family's
// math.h: BCE with logits, the DFL softmax expectation and loss, and CIoU with its
// gradient. Invariants: no allocation, no exceptions; T is float or double; computed in T as
// Ultralytics computes them in the tensors' precision.
#pragma once

#include "src/ops/elementwise/math.h"

namespace hpcnet::math {

HPCNET_HD float log1p_t(float x) { return ::log1pf(x); }
HPCNET_HD double log1p_t(double x) { return ::log1p(x); }
HPCNET_HD float log_t(float x) { return ::logf(x); }
HPCNET_HD double log_t(double x) { return ::log(x); }
HPCNET_HD float atan_t(float x) { return ::atanf(x); }
HPCNET_HD double atan_t(double x) { return ::atan(x); }
template <class T>
HPCNET_HD T abs_t(T x) {
  return x < T(0) ? -x : x;
}
template <class T>
HPCNET_HD T max_t(T a, T b) {
  return a > b ? a : b;
}
template <class T>
HPCNET_HD T min_t(T a, T b) {
  return a < b ? a : b;
}

// ---- BCE with logits (torch's binary_cross_entropy_with_logits, reduction "none") ----

// (1 - t) x + log(1 + e^-|x|) + max(-x, 0): torch's stable form.
template <class T>
HPCNET_HD T bce_logits(T x, T t) {
  return (T(1) - t) * x + (log1p_t(exp_t(-abs_t(x))) + max_t(-x, T(0)));
}
// d/dx = sigmoid(x) - t.
template <class T>
HPCNET_HD T bce_logits_grad(T x, T t) {
  return sigmoid(x) - t;
}

// ---- DFL: one row of R bin logits ----

// The softmax expectation sum_j softmax(x)_j j of a row (Ultralytics' DFL module, the box side
// in grid cells).
template <class T>
HPCNET_HD T dfl_expect_row(const T* x, int64_t R) {
  T mx = x[0];
  for (int64_t j = 1; j < R; ++j) mx = max_t(mx, x[j]);
  double z = 0, e = 0;
  for (int64_t j = 0; j < R; ++j) {
    double p = static_cast<double>(exp_t(x[j] - mx));
    z += p;
    e += p * static_cast<double>(j);
  }
  return static_cast<T>(e / z);
}
// dx_j = dy p_j (j - E).
template <class T>
HPCNET_HD void dfl_expect_row_grad(const T* x, int64_t R, T dy, T* dx) {
  T mx = x[0];
  for (int64_t j = 1; j < R; ++j) mx = max_t(mx, x[j]);
  double z = 0, e = 0;
  for (int64_t j = 0; j < R; ++j) {
    double p = static_cast<double>(exp_t(x[j] - mx));
    z += p;
    e += p * static_cast<double>(j);
  }
  const double E = e / z;
  for (int64_t j = 0; j < R; ++j) {
    double p = static_cast<double>(exp_t(x[j] - mx)) / z;
    dx[j] = static_cast<T>(static_cast<double>(dy) * p * (static_cast<double>(j) - E));
  }
}

// Ultralytics' DFLoss for one side: the target t clamped to [0, R - 1 - 0.01], its bins
// l = floor(t) and l + 1 with weights (l + 1 - t) and (t - l); loss = -(wl logp_l + wr logp_r).
template <class T>
HPCNET_HD void dfl_bins(T t, int64_t R, int64_t& l, T& wl, T& wr) {
  const T hi = static_cast<T>(R - 1) - T(0.01);
  if (!(t > T(0))) t = T(0);  // NaN too
  if (t > hi) t = hi;
  l = static_cast<int64_t>(t);
  wl = static_cast<T>(l + 1) - t;
  wr = T(1) - wl;
}
template <class T>
HPCNET_HD T dfl_loss_row(const T* x, int64_t R, T t) {
  int64_t l;
  T wl, wr;
  dfl_bins(t, R, l, wl, wr);
  T mx = x[0];
  for (int64_t j = 1; j < R; ++j) mx = max_t(mx, x[j]);
  double z = 0;
  for (int64_t j = 0; j < R; ++j) z += static_cast<double>(exp_t(x[j] - mx));
  const T lse = mx + static_cast<T>(log_d(z));
  return -((x[l] - lse) * wl + (x[l + 1] - lse) * wr);
}
// dx_j = g (p_j - wl [j = l] - wr [j = l + 1]).
template <class T>
HPCNET_HD void dfl_loss_row_grad(const T* x, int64_t R, T t, T g, T* dx) {
  int64_t l;
  T wl, wr;
  dfl_bins(t, R, l, wl, wr);
  T mx = x[0];
  for (int64_t j = 1; j < R; ++j) mx = max_t(mx, x[j]);
  double z = 0;
  for (int64_t j = 0; j < R; ++j) z += static_cast<double>(exp_t(x[j] - mx));
  for (int64_t j = 0; j < R; ++j) {
    double p = static_cast<double>(exp_t(x[j] - mx)) / z;
    double hot = (j == l ? static_cast<double>(wl) : 0.0) + (j == l + 1 ? static_cast<double>(wr) : 0.0);
    dx[j] = static_cast<T>(static_cast<double>(g) * (p - hot));
  }
}

// ---- CIoU of two xyxy boxes (Ultralytics' bbox_iou(xywh=False, CIoU=True), eps 1e-7) ----

// Gradient shares of min(a, b) / max(a, b) for a: 1 when a wins, 1/2 on a tie (torch's rule).
template <class T>
HPCNET_HD T min_share(T a, T b) {
  return a < b ? T(1) : (a == b ? T(0.5) : T(0));
}
template <class T>
HPCNET_HD T max_share(T a, T b) {
  return a > b ? T(1) : (a == b ? T(0.5) : T(0));
}

// Returns CIoU(p, q) for p, q = (x1, y1, x2, y2):
//   iou - (rho2 / c2 + v alpha),  v = 4/pi^2 (atan(w2/h2) - atan(w1/h1))^2,
//   alpha = v / (1 - iou + v + eps)
// with h = y2 - y1 + eps. When dp is non-null it receives d(G * CIoU)/dp (4 values); alpha is a
// constant there as Ultralytics computes it under no_grad, unless alpha_grad (the full
// derivative, for finite-difference checks).
template <class T>
HPCNET_HD T ciou(const T* p, const T* q, T G = T(0), T* dp = nullptr, bool alpha_grad = false) {
  const T eps = T(1e-7);
  const T k = T(4.0 / (3.14159265358979323846 * 3.14159265358979323846));
  const T w1 = p[2] - p[0], h1 = p[3] - p[1] + eps;
  const T w2 = q[2] - q[0], h2 = q[3] - q[1] + eps;
  const T iw = min_t(p[2], q[2]) - max_t(p[0], q[0]);
  const T ih = min_t(p[3], q[3]) - max_t(p[1], q[1]);
  const T iwc = max_t(iw, T(0)), ihc = max_t(ih, T(0));
  const T inter = iwc * ihc;
  const T uni = w1 * h1 + w2 * h2 - inter + eps;
  const T iou = inter / uni;
  const T cw = max_t(p[2], q[2]) - min_t(p[0], q[0]);
  const T ch = max_t(p[3], q[3]) - min_t(p[1], q[1]);
  const T c2 = cw * cw + ch * ch + eps;
  const T dx = q[0] + q[2] - p[0] - p[2], dy = q[1] + q[3] - p[1] - p[3];
  const T rho2 = (dx * dx + dy * dy) / T(4);
  const T r1 = w1 / h1;
  const T u = atan_t(w2 / h2) - atan_t(r1);
  const T v = k * u * u;
  const T D = T(1) - iou + v + eps;
  const T alpha = v / D;
  const T value = iou - (rho2 / c2 + v * alpha);
  if (!dp) return value;
  // Reverse mode from d value = G.
  T g_iou = G, g_rho2 = -G / c2, g_c2 = G * rho2 / (c2 * c2), g_v = -G * alpha;
  if (alpha_grad) {  // alpha = v / D, D = 1 - iou + v + eps
    g_v += -G * v * (T(1) - iou + eps) / (D * D);
    g_iou += -G * v * v / (D * D);
  }
  T g_inter = g_iou / uni;
  const T g_uni = -g_iou * inter / (uni * uni);
  T g_w1 = g_uni * h1, g_h1 = g_uni * w1;
  g_inter += -g_uni;
  // Ultralytics' clamp_(0) passes no gradient at exactly 0 (touching boxes), as torch gives it.
  const T g_iw = iw > T(0) ? g_inter * ihc : T(0);
  const T g_ih = ih > T(0) ? g_inter * iwc : T(0);
  const T g_u = g_v * T(2) * k * u;  // u = atan(w2/h2) - atan(w1/h1)
  const T dat = T(1) / (T(1) + r1 * r1);
  g_w1 += -g_u * dat / h1;
  g_h1 += g_u * dat * w1 / (h1 * h1);
  const T g_cw = T(2) * cw * g_c2, g_ch = T(2) * ch * g_c2;
  const T g_dx = g_rho2 * dx / T(2), g_dy = g_rho2 * dy / T(2);
  dp[0] = -max_share(p[0], q[0]) * g_iw - min_share(p[0], q[0]) * g_cw - g_dx - g_w1;
  dp[2] = min_share(p[2], q[2]) * g_iw + max_share(p[2], q[2]) * g_cw - g_dx + g_w1;
  dp[1] = -max_share(p[1], q[1]) * g_ih - min_share(p[1], q[1]) * g_ch - g_dy - g_h1;
  dp[3] = min_share(p[3], q[3]) * g_ih + max_share(p[3], q[3]) * g_ch - g_dy + g_h1;
  return value;
}

}  // namespace hpcnet::math
