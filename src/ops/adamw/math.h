// The per-element arithmetic of the fused AdamW update and the weights' EMA (lerp), shared by the
// CPU loop and the CUDA kernel (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

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
