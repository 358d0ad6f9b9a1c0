// The kernel API of the detection losses (bce_with_logits, gather_anchors, dfl_expect, ciou_loss,
// dfl_loss) (declared in src/ops/kernels.inc): each function checks its arguments and dispatches on
// the device to src/ops/box/cpu.cpp or cuda.cu. The kernel layer: no autograd, no tape (the
// differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void bce_with_logits_forward(const Tensor& x, const Tensor& t, Tensor& loss) {
  detail::check_same_device(op_name::bce_with_logits, x.device(), {&x, &t, &loss});
  HPCNET_DISPATCH(x.device(), bce_with_logits_forward, x, t, loss);
}
void bce_with_logits_backward(const Tensor& dloss, const Tensor& x, const Tensor& t, Tensor& dx) {
  detail::check_same_device("bce_with_logits_backward", x.device(), {&dloss, &x, &t, &dx});
  HPCNET_DISPATCH(x.device(), bce_with_logits_backward, dloss, x, t, dx);
}
void gather_anchors_forward(const Tensor& x, const Tensor& idx, Tensor& y) {
  detail::check_same_device(op_name::gather_anchors, x.device(), {&x, &idx, &y});
  HPCNET_DISPATCH(x.device(), gather_anchors_forward, x, idx, y);
}
void gather_anchors_backward(const Tensor& dy, const Tensor& idx, Tensor& dx) {
  detail::check_same_device("gather_anchors_backward", dx.device(), {&dy, &idx, &dx});
  HPCNET_DISPATCH(dx.device(), gather_anchors_backward, dy, idx, dx);
}
void dfl_expect_forward(const Tensor& x, Tensor& y) {
  detail::check_same_device(op_name::dfl_expect, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), dfl_expect_forward, x, y);
}
void dfl_expect_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  detail::check_same_device("dfl_expect_backward", x.device(), {&dy, &x, &dx});
  HPCNET_DISPATCH(x.device(), dfl_expect_backward, dy, x, dx);
}
void ciou_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                       Tensor& loss) {
  detail::check_same_device(op_name::ciou_loss, pred.device(), {&pred, &target, &weight, &loss});
  HPCNET_DISPATCH(pred.device(), ciou_loss_forward, pred, target, weight, loss);
}
void ciou_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                        const Tensor& weight, bool alpha_grad, Tensor& dpred) {
  detail::check_same_device("ciou_loss_backward", pred.device(),
                            {&dloss, &pred, &target, &weight, &dpred});
  HPCNET_DISPATCH(pred.device(), ciou_loss_backward, dloss, pred, target, weight, alpha_grad,
                  dpred);
}
void dfl_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                      Tensor& loss) {
  detail::check_same_device(op_name::dfl_loss, pred.device(), {&pred, &target, &weight, &loss});
  HPCNET_DISPATCH(pred.device(), dfl_loss_forward, pred, target, weight, loss);
}
void dfl_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                       const Tensor& weight, Tensor& dpred) {
  detail::check_same_device("dfl_loss_backward", pred.device(),
                            {&dloss, &pred, &target, &weight, &dpred});
  HPCNET_DISPATCH(pred.device(), dfl_loss_backward, dloss, pred, target, weight, dpred);
}

}  // namespace hpcnet::ops
