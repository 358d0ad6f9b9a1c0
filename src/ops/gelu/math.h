// The per-element arithmetic of GELU (torch.nn.functional.gelu), shared by the CPU loop and the
// CUDA kernel (src/ops/backend/device_math.h):
//   approximate "none": y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)),
//                       dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
//   approximate "tanh": y = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
//                       dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2).
// Computed in T (erff / tanhf for float), as torch's kernels.
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

HPCNET_HD float erf_t(float x) { return ::erff(x); }
HPCNET_HD double erf_t(double x) { return ::erf(x); }
HPCNET_HD float tanh_t(float x) { return ::tanhf(x); }
HPCNET_HD double tanh_t(double x) { return ::tanh(x); }

template <class T>
HPCNET_HD T gelu(T x, bool tanh_approx) {
  if (tanh_approx) {
    const T k = T(0.7978845608028654), c = T(0.044715);  // sqrt(2 / pi)
    return T(0.5) * x * (T(1) + tanh_t(k * (x + c * x * x * x)));
  }
  return T(0.5) * x * (T(1) + erf_t(x * T(0.7071067811865476)));  // 1 / sqrt 2
}

// dx = dy * dgelu/dx at the forward input x.
template <class T>
HPCNET_HD T gelu_grad(T dy, T x, bool tanh_approx) {
  if (tanh_approx) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    const T t = tanh_t(k * (x + c * x * x * x));
    const T du = k * (T(1) + T(3) * c * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
  const T cdf = T(0.5) * (T(1) + erf_t(x * T(0.7071067811865476)));
  const T pdf = exp_t(T(-0.5) * x * x) * T(0.3989422804014327);  // 1 / sqrt(2 pi)
  return dy * (cdf + x * pdf);
}

}  // namespace hpcnet::math
