// CPU kernels of the optimizer extras: fused AdamW and lerp for the EMA of weights (the
// per-element arithmetic is src/ops/adamw/math.h's, shared with the CUDA kernels), and the
// squared norm used by gradient clipping.
#include <cmath>

#include "src/ops/adamw/math.h"
#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"

namespace hpcnet::cpu {

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& exp_avg, std::vector<Tensor>& exp_avg_sq,
                const AdamWParams& h) {
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined()) continue;
    dispatch_float(params[k].dtype(), "adamw_step", [&](auto tag) {
      using T = decltype(tag);
      const auto c = math::adamw_coeffs<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step);
      T* p = params[k].data<T>();
      const T* g = grads[k].data<T>();
      T* m = exp_avg[k].data<T>();
      T* v = exp_avg_sq[k].data<T>();
      const int64_t n = params[k].numel();
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) math::adamw_element(p[i], g[i], m[i], v[i], c);
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
    for (int64_t i = 0; i < n; ++i) math::lerp(pa[i], pb[i], tw);
  });
}

}  // namespace hpcnet::cpu
