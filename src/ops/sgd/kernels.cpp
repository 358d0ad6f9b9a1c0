// The kernel API of the fused SGD update (declared in src/ops/kernels.inc; the optimizer's one
// kernel call per step): checks, then dispatch to src/ops/sgd/cpu.cpp or cuda.cu.
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void sgd_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              std::vector<Tensor>& bufs, const SgdParams& p) {
  HPCNET_CHECK(params.size() == grads.size() && params.size() == bufs.size(),
               "sgd_step: params, grads and buffers differ in count");
  if (params.empty()) return;
  Device d = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    detail::check_same_device("sgd_step", d, {&params[i], &grads[i], &bufs[i]});
    if (grads[i].defined()) detail::check_shape("sgd_step", grads[i], params[i].shape(), "grad");
  }
  HPCNET_DISPATCH(d, sgd_step, params, grads, bufs, p);
}

}  // namespace hpcnet::ops
