// The per-channel arithmetic of batch normalisation, shared by the CPU loops and the CUDA kernels
// (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double; statistics in double.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

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

// The forward map y = (x - m) a + b: m = the mean rounded to T, a = invstd w, b = bias +
// (m - mean) a (w, bias null: 1, 0). Centring before scaling keeps each output's rounding error
// relative to |y|: the form x a + (bias - mean a) rounds x a, of size |mean| invstd |w|, which in
// float32 loses as many digits as |mean| / std is large (yolov8m's training-mode gradients came
// out 20x less accurate than PyTorch's). Folding m's own rounding into b leaves no per-channel
// offset either.
template <class T>
struct BnAffine {
  T m, a, b;
};
template <class T>
HPCNET_HD BnAffine<T> bn_affine(const BnStats& s, const T* w, const T* bias) {
  const double wa = w ? static_cast<double>(*w) : 1.0;
  const double a = s.invstd * wa;
  const T m = static_cast<T>(s.mean);
  return {m, static_cast<T>(a),
          static_cast<T>((bias ? static_cast<double>(*bias) : 0.0) +
                         (static_cast<double>(m) - s.mean) * a)};
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

}  // namespace hpcnet::math
