// CPU fused SGD: one pass per parameter applies weight decay, momentum (with dampening and
// Nesterov) and the update, exactly in torch.optim.SGD's order:
//   g = grad + wd * p;  buf = first ? g : momentum * buf + (1 - dampening) * g;
//   g = nesterov ? g + momentum * buf : buf;  p -= lr * g
// (math::sgd_element, the CUDA kernel's per-element rule too.)
#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/sgd/math.h"

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
      const math::SgdCoeffs<T> c{static_cast<T>(h.lr),
                                 static_cast<T>(h.weight_decay),
                                 static_cast<T>(h.momentum),
                                 static_cast<T>(1.0 - h.dampening),
                                 h.momentum != 0,
                                 h.first_step,
                                 h.nesterov};
      if (!c.momentum) {
        for (int64_t i = 0; i < n; ++i) math::sgd_element(p[i], g[i], static_cast<T*>(nullptr), c);
        return;
      }
      T* b = bufs[k].data<T>();
      for (int64_t i = 0; i < n; ++i) math::sgd_element(p[i], g[i], b + i, c);
    });
  }
}

}  // namespace hpcnet::cpu
