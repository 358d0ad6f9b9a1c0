// The per-window arithmetic of max pooling, shared by the CPU loops and the CUDA kernels
// (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

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

}  // namespace hpcnet::math
