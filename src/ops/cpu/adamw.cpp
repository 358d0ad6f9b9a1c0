// CPU kernels of the optimizer extras: fused AdamW (torch.optim.AdamW's arithmetic, in the
// parameter's dtype with the bias corrections in double), the squared norm used by gradient
// clipping, and lerp for the EMA of weights.
#include <cmath>

#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/float_dispatch.h"

namespace hpcnet::cpu {

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& exp_avg, std::vector<Tensor>& exp_avg_sq,
                const AdamWParams& h) {
  const double bc1 = 1 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1 - std::pow(h.beta2, static_cast<double>(h.step));
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined()) continue;
    dispatch_float(params[k].dtype(), "adamw_step", [&](auto tag) {
      using T = decltype(tag);
      T* p = params[k].data<T>();
      const T* g = grads[k].data<T>();
      T* m = exp_avg[k].data<T>();
      T* v = exp_avg_sq[k].data<T>();
      const T decay = static_cast<T>(1 - h.lr * h.weight_decay);
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      const T step_size = static_cast<T>(h.lr / bc1);
      const T inv_sqrt_bc2 = static_cast<T>(1 / std::sqrt(bc2));
      const T eps = static_cast<T>(h.eps);
      const int64_t n = params[k].numel();
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
      }
    });
  }
}

void sum_squares(const Tensor& x, Tensor& out) {
  dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < x.numel(); ++i) acc += static_cast<double>(p[i]) * p[i];
    out.data<double>()[0] = acc;
  });
}

void lerp_inplace(Tensor& a, const Tensor& b, double w) {
  dispatch_float(a.dtype(), "lerp", [&](auto tag) {
    using T = decltype(tag);
    T* pa = a.data<T>();
    const T* pb = b.data<T>();
    const T tw = static_cast<T>(w);
    const int64_t n = a.numel();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) pa[i] += tw * (pb[i] - pa[i]);
  });
}

}  // namespace hpcnet::cpu
