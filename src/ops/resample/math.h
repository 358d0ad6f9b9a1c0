// The per-output arithmetic of nearest and bilinear resampling, shared by the CPU loops and the
// CUDA kernels (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

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

}  // namespace hpcnet::math
