// The kernel API of the fused AdamW update, the sum of squares (gradient clipping) and lerp (the
// weights' EMA), declared in src/ops/kernels.inc: checks, then dispatch to src/ops/adamw/cpu.cpp
// or cuda.cu.
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& exp_avg, std::vector<Tensor>& exp_avg_sq,
                const AdamWParams& p) {
  HPCNET_CHECK(params.size() == grads.size() && params.size() == exp_avg.size() &&
                   params.size() == exp_avg_sq.size(),
               "adamw_step: params, grads and state differ in count");
  if (params.empty()) return;
  Device d = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    detail::check_same_device("adamw_step", d, {&params[i], &grads[i], &exp_avg[i], &exp_avg_sq[i]});
    if (grads[i].defined()) detail::check_shape("adamw_step", grads[i], params[i].shape(), "grad");
  }
  HPCNET_DISPATCH(d, adamw_step, params, grads, exp_avg, exp_avg_sq, p);
}

void sum_squares(const Tensor& x, Tensor& out) {
  detail::check_same_device("sum_squares", x.device(), {&x, &out});
  detail::check_dtype("sum_squares", out, DType::kFloat64, "out");
  HPCNET_DISPATCH(x.device(), sum_squares, x, out);
}

void lerp_inplace(Tensor& a, const Tensor& b, double w) {
  detail::check_shape("lerp", b, a.shape(), "end");
  detail::check_dtype("lerp", b, a.dtype(), "end");
  detail::check_same_device("lerp", a.device(), {&a, &b});
  HPCNET_DISPATCH(a.device(), lerp_inplace, a, b, w);
}

}  // namespace hpcnet::ops
