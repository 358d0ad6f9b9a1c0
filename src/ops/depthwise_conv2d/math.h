// The arithmetic of a depthwise 2-D convolution (torch's conv2d with groups = C and a (C, 1, R,
// S) weight): each channel's plane is correlated with its own R x S filter. Per pixel, as the
// CUDA kernels run it (src/ops/backend/device_math.h); the CPU runs the same sums row by row.
//   forward       y[oh, ow]  = b + sum_{r,s} w[r, s] x[oh st - pad + r dil, ow st - pad + s dil]
//   backward data dx[h, w]   = sum of w[r, s] dy[oh, ow] over the (r, s, oh, ow) that read (h, w)
// (taps outside the plane read zero padding). Invariants: no allocation, no exceptions, no I/O;
// T is float or double; the sums accumulate in T (as a convolution's).
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

struct DwGeom {
  int64_t h, w, p, q, r, s;          // input plane, output plane, filter
  int64_t st_h, st_w, pad_h, pad_w;  // stride, padding
  int64_t dil_h, dil_w;              // dilation (1 = none)
};

// One output pixel of one plane: x the (h, w) input plane, f the (r, s) filter.
template <class T>
HPCNET_HD T dw_conv_pixel(const T* x, const T* f, const DwGeom& g, int64_t oh, int64_t ow) {
  T acc = 0;
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t ih = oh * g.st_h - g.pad_h + r * g.dil_h;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t s = 0; s < g.s; ++s) {
      const int64_t iw = ow * g.st_w - g.pad_w + s * g.dil_w;
      if (iw >= 0 && iw < g.w) acc += f[r * g.s + s] * x[ih * g.w + iw];
    }
  }
  return acc;
}

// One input pixel's gradient of one plane: dy the (p, q) output-gradient plane.
template <class T>
HPCNET_HD T dw_conv_input_grad(const T* dy, const T* f, const DwGeom& g, int64_t ih, int64_t iw) {
  T acc = 0;
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t th = ih + g.pad_h - r * g.dil_h;  // = oh st
    if (th < 0 || th % g.st_h != 0 || th / g.st_h >= g.p) continue;
    for (int64_t s = 0; s < g.s; ++s) {
      const int64_t tw = iw + g.pad_w - s * g.dil_w;
      if (tw >= 0 && tw % g.st_w == 0 && tw / g.st_w < g.q)
        acc += f[r * g.s + s] * dy[th / g.st_h * g.q + tw / g.st_w];
    }
  }
  return acc;
}

// The output columns [lo, hi) whose tap at offset off = s dil - pad reads inside an input row of
// w: 0 <= ow st + off < w, clipped to [0, q) (the same for rows).
HPCNET_HD void dw_valid_range(int64_t w, int64_t q, int64_t st, int64_t off, int64_t& lo,
                              int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + st - 1) / st;
  hi = w - off <= 0 ? 0 : (w - off - 1) / st + 1;
  if (hi > q) hi = q;
  if (lo > hi) lo = hi;
}

}  // namespace hpcnet::math
