// The arithmetic of softmax (torch.softmax) over one line of n values lying `stride` apart,
// shared by the CPU loops and the CUDA kernels (src/ops/backend/device_math.h):
//   forward   y_j = e^(x_j - m) / sum_k e^(x_k - m),  m = max_k x_k (no overflow);
//   backward  dx_j = y_j (dy_j - sum_k dy_k y_k), from the forward output y.
// Invariants: no allocation, no exceptions, no I/O; T is float or double; the sums over a line
// accumulate in double (as the softmax losses of src/ops/loss/math.h).
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

// y = softmax(x) over x[0], x[stride], ..., x[(n - 1) stride] (y the same; may alias x).
template <class T>
HPCNET_HD void softmax_line(const T* x, T* y, int64_t n, int64_t stride) {
  T mx = x[0];
  for (int64_t j = 1; j < n; ++j) mx = x[j * stride] > mx ? x[j * stride] : mx;
  double s = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T e = exp_t(x[j * stride] - mx);
    y[j * stride] = e;
    s += e;
  }
  const T inv = static_cast<T>(1.0 / s);
  for (int64_t j = 0; j < n; ++j) y[j * stride] *= inv;
}

// dx = y (dy - sum(dy y)) over one line (dx may alias dy).
template <class T>
HPCNET_HD void softmax_backward_line(const T* dy, const T* y, T* dx, int64_t n, int64_t stride) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(dy[j * stride]) * y[j * stride];
  const T st = static_cast<T>(s);
  for (int64_t j = 0; j < n; ++j) dx[j * stride] = y[j * stride] * (dy[j * stride] - st);
}

}  // namespace hpcnet::math
