// CPU softmax over one dim of a row-major tensor, seen as (outer, n, inner) with the softmax over
// n. float64 runs math.h's line arithmetic (the CUDA kernels' too). float32 has two vectorised
// paths with the polynomial exp of vec_math.h: the last dim (inner = 1, attention's dim=-1: each
// row in 16 float lanes) and the others (a block of up to kBlock neighbouring lines at once, so
// each pass runs along contiguous memory). The float32 paths sum in float lanes, not in double.
// OpenMP over lines when the tensor is large.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/backend/cpu/vec_math.h"
#include "src/ops/softmax/math.h"

namespace hpcnet::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which loops stay serial
constexpr int64_t kLanes = 16;
constexpr int64_t kBlock = 256;  // lines per block of the inner > 1 float32 path

struct Lines {
  int64_t outer, n, inner;
};
Lines lines_of(const Tensor& x, int64_t dim) {
  Lines l{1, x.size(dim), 1};
  for (int64_t d = 0; d < dim; ++d) l.outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

// One contiguous float32 row: y = softmax(x).
void softmax_row_f32(const float* x, float* y, int64_t n) {
  float mx[kLanes], sum[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) mx[l] = x[0], sum[l] = 0.f;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) mx[l] = std::max(mx[l], x[j + l]);
  float m = x[0];
  for (int64_t l = 0; l < kLanes; ++l) m = std::max(m, mx[l]);
  for (; j < n; ++j) m = std::max(m, x[j]);
  for (j = 0; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      const float e = exp_vec(x[j + l] - m);
      y[j + l] = e;
      sum[l] += e;
    }
  float s = 0.f;
  for (; j < n; ++j) s += (y[j] = exp_vec(x[j] - m));
  for (int64_t l = 0; l < kLanes; ++l) s += sum[l];
  const float inv = 1.f / s;
  for (j = 0; j < n; ++j) y[j] *= inv;
}

// One contiguous float32 row: dx = y (dy - sum(dy y)).
void softmax_backward_row_f32(const float* dy, const float* y, float* dx, int64_t n) {
  float sum[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) sum[l] += dy[j + l] * y[j + l];
  float s = 0.f;
  for (; j < n; ++j) s += dy[j] * y[j];
  for (int64_t l = 0; l < kLanes; ++l) s += sum[l];
  for (j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s);
}

// float32 lines [i0, i0 + len) of one outer slice (x and y at the slice's start; the lines are
// neighbours, `inner` apart along n): each pass runs along the len contiguous lines.
void softmax_block_f32(const float* x, float* y, int64_t n, int64_t inner, int64_t len) {
  float mx[kBlock], sum[kBlock];
  for (int64_t p = 0; p < len; ++p) mx[p] = x[p], sum[p] = 0.f;
  for (int64_t j = 1; j < n; ++j)
    for (int64_t p = 0; p < len; ++p) mx[p] = std::max(mx[p], x[j * inner + p]);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < len; ++p) {
      const float e = exp_vec(x[j * inner + p] - mx[p]);
      y[j * inner + p] = e;
      sum[p] += e;
    }
  for (int64_t p = 0; p < len; ++p) sum[p] = 1.f / sum[p];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < len; ++p) y[j * inner + p] *= sum[p];
}

void softmax_backward_block_f32(const float* dy, const float* y, float* dx, int64_t n,
                                int64_t inner, int64_t len) {
  float sum[kBlock] = {};
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < len; ++p) sum[p] += dy[j * inner + p] * y[j * inner + p];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < len; ++p)
      dx[j * inner + p] = y[j * inner + p] * (dy[j * inner + p] - sum[p]);
}

// Calls f(o, i0, len) for every block of `block` lines (of one outer slice), in parallel when
// the tensor is large.
template <class Fn>
void for_blocks(const Lines& l, int64_t block, Fn&& f) {
  const int64_t per_outer = (l.inner + block - 1) / block;
  const int64_t total = l.outer * per_outer;
#pragma omp parallel for if (l.outer * l.n * l.inner > kParallelMin) schedule(static)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t o = t / per_outer, i0 = t % per_outer * block;
    f(o, i0, std::min(block, l.inner - i0));
  }
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y, int64_t dim) {
  const Lines l = lines_of(x, dim);
  if (x.numel() == 0) return;
  dispatch_float(x.dtype(), op_name::softmax, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t slice = l.n * l.inner;
    if constexpr (std::is_same_v<T, float>) {
      if (l.inner == 1) {
        for_blocks({l.outer, l.n, 1}, 1, [&](int64_t o, int64_t, int64_t) {
          softmax_row_f32(px + o * l.n, py + o * l.n, l.n);
        });
      } else {
        for_blocks(l, kBlock, [&](int64_t o, int64_t i0, int64_t len) {
          softmax_block_f32(px + o * slice + i0, py + o * slice + i0, l.n, l.inner, len);
        });
      }
    } else {
      for_blocks(l, 1, [&](int64_t o, int64_t i, int64_t) {
        math::softmax_line(px + o * slice + i, py + o * slice + i, l.n, l.inner);
      });
    }
  });
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t dim) {
  const Lines l = lines_of(y, dim);
  if (y.numel() == 0) return;
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    const int64_t slice = l.n * l.inner;
    if constexpr (std::is_same_v<T, float>) {
      if (l.inner == 1) {
        for_blocks({l.outer, l.n, 1}, 1, [&](int64_t o, int64_t, int64_t) {
          softmax_backward_row_f32(pdy + o * l.n, py + o * l.n, pdx + o * l.n, l.n);
        });
      } else {
        for_blocks(l, kBlock, [&](int64_t o, int64_t i0, int64_t len) {
          const int64_t at = o * slice + i0;
          softmax_backward_block_f32(pdy + at, py + at, pdx + at, l.n, l.inner, len);
        });
      }
    } else {
      for_blocks(l, 1, [&](int64_t o, int64_t i, int64_t) {
        const int64_t at = o * slice + i;
        math::softmax_backward_line(pdy + at, py + at, pdx + at, l.n, l.inner);
      });
    }
  });
}

}  // namespace hpcnet::cpu
