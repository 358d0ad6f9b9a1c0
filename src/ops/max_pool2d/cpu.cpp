// CPU max pooling on plain NCHW, float32 and float64 alike. The forward records, per output, the
// input position (within its plane) that held the window's maximum, as int32 in the workspace
// (-1 where a window saw only padding); the backward scatters each output gradient there.
// (oneDNN 2.6's pooling on plain layouts transposes to blocked layouts and back, and measured
// 5-10x slower than these loops on the LeNet shapes; see bench/README.md.) The general window
// scan is math::pool_window_max, the CUDA kernel's too; stride-1 windows without positions
// (inference) are separable.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/max_pool2d/math.h"

namespace hpcnet::cpu {
namespace {

// The common 2x2 window with stride 2 and no padding, branch-free so it vectorises (random data
// defeats branch prediction). Ties keep the first position in scan order and a NaN wins (the last
// one in scan order), as PyTorch does.
template <class T>
void pool2x2_plane(const T* __restrict xp, T* __restrict yp, int32_t* __restrict ap, int64_t W,
                   int64_t P, int64_t Q) {
  for (int64_t oh = 0; oh < P; ++oh) {
    const T* r0 = xp + 2 * oh * W;
    const T* r1 = r0 + W;
    T* yr = yp + oh * Q;
    int32_t* ar = ap ? ap + oh * Q : nullptr;
    const int32_t base = static_cast<int32_t>(2 * oh * W);
    for (int64_t ow = 0; ow < Q; ++ow) {
      T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
      bool hb = b > a || b != b, hd = d > c || d != d;
      T m01 = hb ? b : a, m23 = hd ? d : c;
      bool second = m23 > m01 || m23 != m23;
      yr[ow] = second ? m23 : m01;
      if (ar) {
        int32_t i = base + static_cast<int32_t>(2 * ow);
        int32_t i01 = hb ? i + 1 : i, i23 = hd ? i + static_cast<int32_t>(W) + 1 : i + static_cast<int32_t>(W);
        ar[ow] = second ? i23 : i01;
      }
    }
  }
}

// The larger of a and b, NaN if either is (a compare and a blend: the loops vectorise).
template <class T>
inline T nan_max(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// Stride-1 windows when no position is recorded (inference; YOLO's SPPF: 5x5, padding 2): the
// window's maximum is the maximum over its rows of each row's maximum, so one pass along the rows
// (rowmax, H x Q) and one down the columns, each along contiguous memory: about (kh + kw) / (kh
// kw) of the comparisons of the window scan, vectorised. Values as pool_window_max's (a maximum
// has no order; a NaN in the window is the result).
template <class T>
void pool_stride1_plane(const T* __restrict xp, T* __restrict yp, T* __restrict rowmax, int64_t H,
                        int64_t W, int64_t P, int64_t Q, const Pool2dParams& p) {
  const int64_t kh = p.kernel_h, kw = p.kernel_w, ph = p.pad_h, pw = p.pad_w;
  // Outputs [a, b) see whole windows along a row; those outside are clipped at the borders.
  const int64_t a = std::min(Q, pw), b = std::max(a, std::min(Q, W - kw + pw + 1));
  for (int64_t h = 0; h < H; ++h) {
    const T* xr = xp + h * W;
    T* rr = rowmax + h * Q;
    auto clipped = [&](int64_t ow) {
      const int64_t lo = std::max<int64_t>(0, ow - pw), hi = std::min(W, ow - pw + kw);
      T m = xr[lo];
      for (int64_t iw = lo + 1; iw < hi; ++iw) m = nan_max(m, xr[iw]);
      rr[ow] = m;
    };
    for (int64_t ow = 0; ow < a; ++ow) clipped(ow);
    for (int64_t ow = a; ow < b; ++ow) rr[ow] = xr[ow - pw];
    for (int64_t t = 1; t < kw; ++t)
      for (int64_t ow = a; ow < b; ++ow) rr[ow] = nan_max(rr[ow], xr[ow - pw + t]);
    for (int64_t ow = b; ow < Q; ++ow) clipped(ow);
  }
  for (int64_t oh = 0; oh < P; ++oh) {
    const int64_t lo = std::max<int64_t>(0, oh - ph), hi = std::min(H, oh - ph + kh);
    T* yr = yp + oh * Q;
    std::memcpy(yr, rowmax + lo * Q, sizeof(T) * Q);
    for (int64_t r = lo + 1; r < hi; ++r) {
      const T* rr = rowmax + r * Q;
      for (int64_t ow = 0; ow < Q; ++ow) yr[ow] = nan_max(yr[ow], rr[ow]);
    }
  }
}

// Output (oh, ow) by the window scan of math::pool_window_max: its maximum into y, and where
// positions are recorded (a not null), its position into a.
template <class T>
void scan_output(const T* xp, const math::PoolGeom& g, int64_t oh, int64_t ow, T* y, int32_t* a) {
  T best;
  int64_t at;
  math::pool_window_max(xp, g, oh, ow, best, at);
  *y = best;
  if (a) *a = static_cast<int32_t>(at);
}

// Any window, stride S along the rows (1 or 2, known at compile time: ResNet's stem pool is 3x3
// stride 2), positions recorded when Pos: the outputs whose windows lie whole inside the row
// (columns [a, b)) go tap by tap, each tap a compare-and-blend over the row of outputs, which
// vectorises; the taps in the scan's order (row by row, left to right), so values, positions,
// ties and NaN are pool_window_max's, which the border outputs still use.
template <class T, int S, bool Pos>
void pool_rows_plane(const T* __restrict xp, T* __restrict yp, int32_t* __restrict ap,
                     const math::PoolGeom& g, int64_t P, int64_t Q) {
  const int64_t a = std::min(Q, (g.pw + S - 1) / S);
  const int64_t b = std::max(a, std::min(Q, g.W - g.kw + g.pw >= 0 ? (g.W - g.kw + g.pw) / S + 1 : 0));
  for (int64_t oh = 0; oh < P; ++oh) {
    T* yr = yp + oh * Q;
    int32_t* ar = Pos ? ap + oh * Q : nullptr;
    auto scan = [&](int64_t ow) { scan_output(xp, g, oh, ow, yr + ow, Pos ? ar + ow : nullptr); };
    for (int64_t ow = 0; ow < a; ++ow) scan(ow);
    for (int64_t ow = b; ow < Q; ++ow) scan(ow);
    const int64_t ih0 = oh * g.sh - g.ph;
    const int64_t lo = std::max<int64_t>(0, ih0), hi = std::min(g.H, ih0 + g.kh);
    if (lo >= hi) {  // the window saw only padding rows
      for (int64_t ow = a; ow < b; ++ow) scan(ow);
      continue;
    }
    for (int64_t ih = lo; ih < hi; ++ih)
      for (int64_t t = 0; t < g.kw; ++t) {
        const T* xr = xp + ih * g.W + t - g.pw;
        const int32_t base = static_cast<int32_t>(ih * g.W + t - g.pw);
        if (ih == lo && t == 0) {  // the first tap starts every window
          for (int64_t ow = a; ow < b; ++ow) {
            yr[ow] = xr[ow * S];
            if (Pos) ar[ow] = base + static_cast<int32_t>(ow * S);
          }
          continue;
        }
        for (int64_t ow = a; ow < b; ++ow) {
          const T v = xr[ow * S];
          const bool take = v > yr[ow] || v != v;
          yr[ow] = take ? v : yr[ow];
          if (Pos) ar[ow] = take ? base + static_cast<int32_t>(ow * S) : ar[ow];
        }
      }
  }
}

template <class T, int S>
void pool_rows(const T* xp, T* yp, int32_t* ap, const math::PoolGeom& g, int64_t P, int64_t Q) {
  if (ap)
    pool_rows_plane<T, S, true>(xp, yp, ap, g, P, Q);
  else
    pool_rows_plane<T, S, false>(xp, yp, ap, g, P, Q);
}

template <class T>
void pool_fwd(const T* x, T* y, int32_t* arg, int64_t planes, int64_t H, int64_t W, int64_t P,
              int64_t Q, const Pool2dParams& p) {
  const bool simple = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
                      p.pad_h == 0 && p.pad_w == 0;
  if (!arg && p.stride_h == 1 && p.stride_w == 1) {
#pragma omp parallel if (planes * H * W > (1 << 14))
    {
      std::vector<T> rowmax(static_cast<size_t>(H * Q));  // one per thread
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl)
        pool_stride1_plane(x + pl * H * W, y + pl * P * Q, rowmax.data(), H, W, P, Q, p);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (planes * H * W > (1 << 16))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * H * W;
    T* yp = y + pl * P * Q;
    int32_t* ap = arg ? arg + pl * P * Q : nullptr;
    if (simple) {
      pool2x2_plane(xp, yp, ap, W, P, Q);
      continue;
    }
    const math::PoolGeom g{H, W, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
    if (p.stride_w == 1 || p.stride_w == 2) {
      (p.stride_w == 1 ? pool_rows<T, 1> : pool_rows<T, 2>)(xp, yp, ap, g, P, Q);
      continue;
    }
    for (int64_t oh = 0; oh < P; ++oh)
      for (int64_t ow = 0; ow < Q; ++ow)
        scan_output(xp, g, oh, ow, yp + oh * Q + ow, ap ? ap + oh * Q + ow : nullptr);
  }
}

template <class T>
void pool_bwd(const T* dy, const int32_t* arg, T* dx, int64_t planes, int64_t HW, int64_t PQ) {
  std::memset(dx, 0, sizeof(T) * planes * HW);
#pragma omp parallel for schedule(static) if (planes * HW > (1 << 16))
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < PQ; ++i) {
      int32_t a = arg[pl * PQ + i];
      if (a >= 0) dx[pl * HW + a] += dy[pl * PQ + i];
    }
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor* workspace, const Pool2dParams& p) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  if (workspace && (!workspace->defined() || workspace->shape() != ys ||
                    workspace->dtype() != DType::kInt32))
    *workspace = Tensor::empty(ys, DType::kInt32);
  int32_t* arg = workspace ? workspace->data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), op_name::max_pool2d, [&](auto tag) {
    using T = decltype(tag);
    pool_fwd<T>(x.data<T>(), y.data<T>(), arg, xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], p);
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& workspace, Tensor& dx,
                         const Pool2dParams& p) {
  const Shape& xs = dx.shape();
  const Shape& ys = dy.shape();
  dispatch_float(dy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    pool_bwd<T>(dy.data<T>(), workspace.data<int32_t>(), dx.data<T>(), xs[0] * xs[1],
                xs[2] * xs[3], ys[2] * ys[3]);
  });
}

}  // namespace hpcnet::cpu
