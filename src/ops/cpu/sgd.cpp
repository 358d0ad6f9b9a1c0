// CPU fused SGD: one pass per parameter applies weight decay, momentum (with dampening and
// Nesterov) and the update, exactly in torch.optim.SGD's order:
//   g = grad + wd * p;  buf = first ? g : momentum * buf + (1 - dampening) * g;
//   g = nesterov ? g + momentum * buf : buf;  p -= lr * g
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/float_dispatch.h"

namespace hpcnet::cpu {

void sgd_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              std::vector<Tensor>& bufs, const SgdParams& h) {
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor& param = params[k];
    const Tensor& grad = grads[k];
    if (!grad.defined()) continue;
    dispatch_float(param.dtype(), "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      T* p = param.data<T>();
      const T* g = grad.data<T>();
      int64_t n = param.numel();
      const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay);
      const T mom = static_cast<T>(h.momentum), damp = static_cast<T>(1.0 - h.dampening);
      if (h.momentum == 0) {
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
        return;
      }
      T* b = bufs[k].data<T>();
      const bool first = h.first_step, nesterov = h.nesterov;
      for (int64_t i = 0; i < n; ++i) {
        T d = g[i] + wd * p[i];
        T m = first ? d : mom * b[i] + damp * d;
        b[i] = m;
        p[i] -= lr * (nesterov ? d + mom * m : m);
      }
    });
  }
}

}  // namespace hpcnet::cpu
