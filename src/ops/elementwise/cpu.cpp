// CPU elementwise ops and reductions: relu, add, scale, sum, mean and the fill used by their
// backward. Contiguous tensors; loops vectorise; large ones split across OpenMP threads. The
// per-element arithmetic is src/ops/elementwise/math.h's, shared with the CUDA kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/backend/cpu/vec_math.h"
#include "src/ops/elementwise/math.h"

namespace hpcnet::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
}

void relu_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), op_name::relu, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) py[i] = math::relu(px[i]);
  });
}

void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  dispatch_float(dy.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    int64_t n = dy.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) pdx[i] = math::relu_grad(pdy[i], py[i]);
  });
}

namespace {
// y[i] = f(x[i]) or y[i] = f(a[i], b[i]) over contiguous tensors, OpenMP when large.
template <class T, class Fn>
void map_unary(const T* px, T* py, int64_t n, Fn f) {
#pragma omp parallel for if (n > kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
}
template <class T, class Fn>
void map_binary(const T* pa, const T* pb, T* po, int64_t n, Fn f) {
#pragma omp parallel for if (n > kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
}
}  // namespace

namespace {
inline float sigmoid_vec(float v) { return 1.0f / (1.0f + exp_vec(-v)); }
}  // namespace

// float32: the vectorised exp (the op's float64 path, used by the finite-difference checks, keeps
// libm's).
void silu_forward(const Tensor& x, Tensor& y) {
  if (x.dtype() == DType::kFloat32) {
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) py[i] = px[i] * sigmoid_vec(px[i]);
    return;
  }
  dispatch_float(x.dtype(), op_name::silu, [&](auto tag) {
    using T = decltype(tag);
    map_unary(x.data<T>(), y.data<T>(), x.numel(), [](T v) { return math::silu(v); });
  });
}

void silu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  if (dy.dtype() == DType::kFloat32) {
    const float* pg = dy.data<float>();
    const float* px = x.data<float>();
    float* pdx = dx.data<float>();
    const int64_t n = dy.numel();
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid_vec(px[i]);
      pdx[i] = pg[i] * s * (1.0f + px[i] * (1.0f - s));
    }
    return;
  }
  dispatch_float(dy.dtype(), "silu_backward", [&](auto tag) {
    using T = decltype(tag);
    map_binary(dy.data<T>(), x.data<T>(), dx.data<T>(), dy.numel(),
               [](T g, T v) { return math::silu_grad(g, v); });
  });
}

void sigmoid_forward(const Tensor& x, Tensor& y) {
  if (x.dtype() == DType::kFloat32) {
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) py[i] = sigmoid_vec(px[i]);
    return;
  }
  dispatch_float(x.dtype(), op_name::sigmoid, [&](auto tag) {
    using T = decltype(tag);
    map_unary(x.data<T>(), y.data<T>(), x.numel(), [](T v) { return math::sigmoid(v); });
  });
}

void sigmoid_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  dispatch_float(dy.dtype(), "sigmoid_backward", [&](auto tag) {
    using T = decltype(tag);
    map_binary(dy.data<T>(), y.data<T>(), dx.data<T>(), dy.numel(),
               [](T g, T v) { return math::sigmoid_grad(g, v); });
  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_float(a.dtype(), op_name::mul, [&](auto tag) {
    using T = decltype(tag);
    map_binary(a.data<T>(), b.data<T>(), out.data<T>(), a.numel(),
               [](T u, T v) { return math::mul(u, v); });
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_float(a.dtype(), op_name::add, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    int64_t n = a.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = math::add(pa[i], pb[i]);
  });
}

void add_inplace(Tensor& a, const Tensor& b) { add(a, b, a); }

void scale(const Tensor& x, double s, Tensor& out) {
  dispatch_float(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    T f = static_cast<T>(s);
    int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = math::scale(px[i], f);
  });
}

namespace {
// Sum in double (pairwise over blocks would also do; double is exact enough here).
template <class T>
double sum_all(const T* p, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}
}  // namespace

void sum_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), op_name::sum, [&](auto tag) {
    using T = decltype(tag);
    y.data<T>()[0] = static_cast<T>(sum_all(x.data<T>(), x.numel()));
  });
}

void mean_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), op_name::mean, [&](auto tag) {
    using T = decltype(tag);
    int64_t n = x.numel();
    y.data<T>()[0] = static_cast<T>(n ? sum_all(x.data<T>(), n) / n : NAN);
  });
}

void fill_like_backward(const Tensor& dy, double factor, Tensor& dx) {
  dispatch_float(dx.dtype(), "fill_like_backward", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(dy.data<T>()[0] * factor);
    T* p = dx.data<T>();
    int64_t n = dx.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

}  // namespace hpcnet::cpu
