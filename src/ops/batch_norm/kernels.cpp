// The kernel API of batch_norm_forward / _backward (declared in src/ops/kernels.inc): each function
// checks its arguments and dispatches on the device to src/ops/batch_norm/cpu.cpp or cuda.cu. The
// kernel layer: no autograd, no tape (the differentiable F:: functions are in functional.cpp beside
// it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, Tensor& running_mean, Tensor& running_var,
                        Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                        const BatchNormParams& p) {
  detail::check_same_device_dense(op_name::batch_norm, x.device(),
                                  {&x, &weight, &bias, &residual, &running_mean, &running_var,
                                   &y, &save_mean, &save_invstd});
  // No channels: nothing to normalise, every output is empty (CUDA launches a block per channel,
  // and a launch of 0 blocks is an error).
  if (x.size(1) == 0) return;
  HPCNET_DISPATCH_FLOPS(4.0 * x.numel(), x.device(), batch_norm_forward, x, weight, bias,
                        residual, running_mean, running_var, y, save_mean, save_invstd, p);
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                         const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                         Tensor& dweight, Tensor& dbias, const BatchNormParams& p) {
  detail::check_same_device_dense("batch_norm_backward", x.device(),
                                  {&g, &x, &weight, &save_mean, &save_invstd, &dx, &dweight,
                                   &dbias});
  if (x.size(1) == 0) return;  // no channels: every gradient is empty
  HPCNET_DISPATCH_FLOPS(6.0 * x.numel(), x.device(), batch_norm_backward, g, x, weight,
                        save_mean, save_invstd, dx, dweight, dbias, p);
}

}  // namespace hpcnet::ops
