// CPU softmax-family ops over dim 1 of (N, C): log_softmax, nll_loss, fused cross_entropy (with
// label smoothing, as torch.nn.functional.cross_entropy), and argmax. Row maxima are subtracted
// before exponentiating; sums accumulate in double. The row arithmetic is
// src/ops/elementwise_math.h's, which the CUDA kernels run too.
#include <cmath>
#include <string>

#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/float_dispatch.h"
#include "src/ops/elementwise_math.h"

namespace hpcnet::cpu {
namespace {

void check_label(int64_t label, int64_t c, int64_t row) {
  if (label < 0 || label >= c)
    throw InputError("label " + std::to_string(label) + " of sample " + std::to_string(row) +
                     " is out of range [0, " + std::to_string(c) + ")");
}

}  // namespace

void log_softmax_forward(const Tensor& x, Tensor& y) {
  int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i)
      math::log_softmax_row(x.data<T>() + i * c, y.data<T>() + i * c, c);
  });
}

void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  int64_t n = y.size(0), c = y.size(1);
  dispatch_float(y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    for (int64_t i = 0; i < n; ++i)
      math::log_softmax_backward_row(pdy + i * c, py + i * c, pdx + i * c, c);
  });
}

void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss) {
  int64_t n = logp.size(0), c = logp.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* p = logp.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      check_label(t[i], c, i);
      acc -= p[i * c + t[i]];
    }
    loss.data<T>()[0] = static_cast<T>(acc / n);
  });
}

void nll_loss_backward(const Tensor& dloss, const Tensor& target, Tensor& dlogp) {
  int64_t n = dlogp.size(0), c = dlogp.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(dlogp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    T g = math::nll_grad_scale(dloss.data<T>()[0], n);
    T* p = dlogp.data<T>();
    for (int64_t i = 0; i < n * c; ++i) p[i] = T(0);
    for (int64_t i = 0; i < n; ++i) p[i * c + t[i]] = g;
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, Tensor& loss,
                           Tensor& prob) {
  int64_t n = logits.size(0), c = logits.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* pr = prob.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      check_label(t[i], c, i);
      acc += math::cross_entropy_row(x + i * c, pr + i * c, c, t[i], eps);
    }
    loss.data<T>()[0] = static_cast<T>(acc / n);
  });
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                            double eps, Tensor& dlogits) {
  int64_t n = prob.size(0), c = prob.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(prob.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pr = prob.data<T>();
    T* d = dlogits.data<T>();
    T g = math::cross_entropy_grad_scale(dloss.data<T>()[0], n);
    math::SmoothedTarget w = math::smoothed_target(eps, c);
    T on = static_cast<T>(w.on), off = static_cast<T>(w.off);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j)
        d[i * c + j] = math::cross_entropy_grad(g, pr[i * c + j], j == t[i], on, off);
  });
}

void argmax(const Tensor& x, Tensor& out) {
  int64_t n = x.size(0), c = x.size(1);
  int64_t* po = out.data<int64_t>();
  dispatch_float(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0; i < n; ++i) po[i] = math::argmax_row(p + i * c, c);
  });
}

}  // namespace hpcnet::cpu
