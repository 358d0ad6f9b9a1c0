// CPU max pooling on plain NCHW, float32 and float64 alike. The forward records, per output, the
// input position (within its plane) that held the window's maximum, as int32 in the workspace
// (-1 where a window saw only padding); the backward scatters each output gradient there.
// (oneDNN 2.6's pooling on plain layouts transposes to blocked layouts and back, and measured
// 5-10x slower than these loops on the LeNet shapes; see bench/README.md.) The general window
// scan is math::pool_window_max, the CUDA kernel's too.
#include <cstring>
#include <limits>

#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/float_dispatch.h"
#include "src/ops/elementwise_math.h"

namespace hpcnet::cpu {
namespace {

// The common 2x2 window with stride 2 and no padding, branch-free so it vectorises (random data
// defeats branch prediction). Ties keep the first position in scan order, as PyTorch does.
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
      bool hb = b > a, hd = d > c;
      T m01 = hb ? b : a, m23 = hd ? d : c;
      bool second = m23 > m01;
      yr[ow] = second ? m23 : m01;
      if (ar) {
        int32_t i = base + static_cast<int32_t>(2 * ow);
        int32_t i01 = hb ? i + 1 : i, i23 = hd ? i + static_cast<int32_t>(W) + 1 : i + static_cast<int32_t>(W);
        ar[ow] = second ? i23 : i01;
      }
    }
  }
}

template <class T>
void pool_fwd(const T* x, T* y, int32_t* arg, int64_t planes, int64_t H, int64_t W, int64_t P,
              int64_t Q, const Pool2dParams& p) {
  const bool simple = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
                      p.pad_h == 0 && p.pad_w == 0;
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
    for (int64_t oh = 0; oh < P; ++oh)
      for (int64_t ow = 0; ow < Q; ++ow) {
        T best;
        int64_t at;
        math::pool_window_max(xp, g, oh, ow, best, at);
        yp[oh * Q + ow] = best;
        if (ap) ap[oh * Q + ow] = static_cast<int32_t>(at);
      }
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
  dispatch_float(x.dtype(), "max_pool2d", [&](auto tag) {
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
