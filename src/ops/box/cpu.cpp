// CPU kernels of the detection losses: summed BCE with logits, the anchor gather, the DFL
// expectation and loss, the weighted CIoU loss. Row-major tensors; sums in double in index order
// (deterministic); the arithmetic is src/ops/box/math.h's, shared with the CUDA kernels.
#include <vector>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/box/math.h"

namespace hpcnet::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 15;

// The 0-d gradient factor dloss[0].
template <class T>
T scalar_of(const Tensor& t) {
  return t.data<T>()[0];
}
}  // namespace

void bce_with_logits_forward(const Tensor& x, const Tensor& t, Tensor& loss) {
  dispatch_float(x.dtype(), op_name::bce_with_logits, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pt = t.data<T>();
    const int64_t n = x.numel();
    double acc = 0;
#pragma omp parallel for if (n > kParallelMin) schedule(static) reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(math::bce_logits(px[i], pt[i]));
    loss.data<T>()[0] = static_cast<T>(acc);
  });
}

void bce_with_logits_backward(const Tensor& dloss, const Tensor& x, const Tensor& t, Tensor& dx) {
  dispatch_float(x.dtype(), "bce_with_logits_backward", [&](auto tag) {
    using T = decltype(tag);
    const T g = scalar_of<T>(dloss);
    const T* px = x.data<T>();
    const T* pt = t.data<T>();
    T* pd = dx.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = g * math::bce_logits_grad(px[i], pt[i]);
  });
}

void gather_anchors_forward(const Tensor& x, const Tensor& idx, Tensor& y) {
  dispatch_float(x.dtype(), op_name::gather_anchors, [&](auto tag) {
    using T = decltype(tag);
    const int64_t C = x.size(1), A = x.size(2), M = idx.numel();
    const T* px = x.data<T>();
    const int64_t* pi = idx.data<int64_t>();
    T* py = y.data<T>();
    for (int64_t m = 0; m < M; ++m) {
      const int64_t b = pi[m] / A, a = pi[m] % A;
      for (int64_t c = 0; c < C; ++c) py[m * C + c] = px[(b * C + c) * A + a];
    }
  });
}

void gather_anchors_backward(const Tensor& dy, const Tensor& idx, Tensor& dx) {
  dispatch_float(dx.dtype(), "gather_anchors_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t C = dx.size(1), A = dx.size(2), M = idx.numel();
    T* pd = dx.data<T>();
    const int64_t n = dx.numel();
    for (int64_t i = 0; i < n; ++i) pd[i] = T(0);
    const T* pg = dy.data<T>();
    const int64_t* pi = idx.data<int64_t>();
    for (int64_t m = 0; m < M; ++m) {
      const int64_t b = pi[m] / A, a = pi[m] % A;
      for (int64_t c = 0; c < C; ++c) pd[(b * C + c) * A + a] += pg[m * C + c];
    }
  });
}

void dfl_expect_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), op_name::dfl_expect, [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = x.size(0), R = x.size(1);
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for if (N * R > kParallelMin) schedule(static)
    for (int64_t i = 0; i < N; ++i) py[i] = math::dfl_expect_row(px + i * R, R);
  });
}

void dfl_expect_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  dispatch_float(x.dtype(), "dfl_expect_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = x.size(0), R = x.size(1);
    const T* px = x.data<T>();
    const T* pg = dy.data<T>();
    T* pd = dx.data<T>();
#pragma omp parallel for if (N * R > kParallelMin) schedule(static)
    for (int64_t i = 0; i < N; ++i) math::dfl_expect_row_grad(px + i * R, R, pg[i], pd + i * R);
  });
}

void ciou_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                       Tensor& loss) {
  dispatch_float(pred.dtype(), op_name::ciou_loss, [&](auto tag) {
    using T = decltype(tag);
    const int64_t M = pred.size(0);
    const T* pp = pred.data<T>();
    const T* pt = target.data<T>();
    const T* pw = weight.data<T>();
    double acc = 0;
    for (int64_t m = 0; m < M; ++m)
      acc += static_cast<double>((T(1) - math::ciou(pp + 4 * m, pt + 4 * m)) * pw[m]);
    loss.data<T>()[0] = static_cast<T>(acc);
  });
}

void ciou_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                        const Tensor& weight, bool alpha_grad, Tensor& dpred) {
  dispatch_float(pred.dtype(), "ciou_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T g = scalar_of<T>(dloss);
    const int64_t M = pred.size(0);
    const T* pp = pred.data<T>();
    const T* pt = target.data<T>();
    const T* pw = weight.data<T>();
    T* pd = dpred.data<T>();
    for (int64_t m = 0; m < M; ++m)  // loss = w (1 - ciou): d/dciou = -w g
      math::ciou(pp + 4 * m, pt + 4 * m, -pw[m] * g, pd + 4 * m, alpha_grad);
  });
}

void dfl_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                      Tensor& loss) {
  dispatch_float(pred.dtype(), op_name::dfl_loss, [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = pred.size(0), R = pred.size(1);
    const T* pp = pred.data<T>();
    const T* pt = target.data<T>();
    const T* pw = weight.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < N; ++i)
      acc += static_cast<double>(math::dfl_loss_row(pp + i * R, R, pt[i]) * pw[i]);
    loss.data<T>()[0] = static_cast<T>(acc);
  });
}

void dfl_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                       const Tensor& weight, Tensor& dpred) {
  dispatch_float(pred.dtype(), "dfl_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T g = scalar_of<T>(dloss);
    const int64_t N = pred.size(0), R = pred.size(1);
    const T* pp = pred.data<T>();
    const T* pt = target.data<T>();
    const T* pw = weight.data<T>();
    T* pd = dpred.data<T>();
    for (int64_t i = 0; i < N; ++i)
      math::dfl_loss_row_grad(pp + i * R, R, pt[i], g * pw[i], pd + i * R);
  });
}

}  // namespace hpcnet::cpu
