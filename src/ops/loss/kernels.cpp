// The kernel API of log_softmax, nll_loss, cross_entropy, cross_entropy2d, dice_loss and argmax
// (declared in src/ops/kernels.inc): each function checks its arguments and dispatches on the
// device to src/ops/loss/cpu.cpp or cuda.cu. The kernel layer: no autograd, no tape (the
// differentiable F:: functions are in functional.cpp beside it).
#include "src/ops/loss/checks.h"
#include "src/ops/dispatch.h"

namespace hpcnet::ops {

void log_softmax_forward(const Tensor& x, Tensor& y) {
  HPCNET_CHECK(x.dim() == 2, "log_softmax: input must be (N, C), got " + shape_str(x.shape()));
  detail::check_same_device(op_name::log_softmax, x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), log_softmax_forward, x, y);
}
void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  detail::check_same_device("log_softmax_backward", dy.device(), {&dy, &y, &dx});
  HPCNET_DISPATCH(dy.device(), log_softmax_backward, dy, y, dx);
}
void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss) {
  check_rows_targets(op_name::nll_loss, logp, target);
  HPCNET_DISPATCH(logp.device(), nll_loss_forward, logp, target, loss);
}
void nll_loss_backward(const Tensor& dloss, const Tensor& target, Tensor& dlogp) {
  detail::check_same_device("nll_loss_backward", dlogp.device(), {&dloss, &target, &dlogp});
  HPCNET_DISPATCH(dlogp.device(), nll_loss_backward, dloss, target, dlogp);
}
void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, Tensor& loss,
                           Tensor& prob) {
  check_rows_targets(op_name::cross_entropy, logits, target);
  HPCNET_CHECK(eps >= 0 && eps <= 1,
               "cross_entropy: label_smoothing must be in [0, 1], got " + num(eps));
  HPCNET_DISPATCH(logits.device(), cross_entropy_forward, logits, target, eps, loss, prob);
}
void cross_entropy_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                            double eps, Tensor& dlogits) {
  detail::check_same_device("cross_entropy_backward", prob.device(),
                            {&dloss, &prob, &target, &dlogits});
  HPCNET_DISPATCH(prob.device(), cross_entropy_backward, dloss, prob, target, eps, dlogits);
}
void cross_entropy2d_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, Tensor& loss, Tensor& prob,
                             Tensor& total_weight) {
  check_cross_entropy2d(logits, target, weight);
  detail::check_shape(op_name::cross_entropy2d, prob, logits.shape(), "prob");
  detail::check_dtype(op_name::cross_entropy2d, prob, logits.dtype(), "prob");
  detail::check_dtype(op_name::cross_entropy2d, loss, logits.dtype(), "loss");
  detail::check_dtype(op_name::cross_entropy2d, total_weight, DType::kFloat64, "total_weight");
  HPCNET_CHECK(loss.numel() == 1 && total_weight.numel() == 1,
               "cross_entropy2d: loss and total_weight are 0-d");
  detail::check_same_device(op_name::cross_entropy2d, logits.device(),
                            {&logits, &target, &weight, &loss, &prob, &total_weight});
  HPCNET_DISPATCH(logits.device(), cross_entropy2d_forward, logits, target, weight, ignore_index,
                  loss, prob, total_weight);
}
void cross_entropy2d_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                              const Tensor& weight, const Tensor& total_weight,
                              int64_t ignore_index, Tensor& dlogits) {
  check_cross_entropy2d(prob, target, weight);
  detail::check_shape("cross_entropy2d_backward", dlogits, prob.shape(), "dlogits");
  detail::check_dtype("cross_entropy2d_backward", dlogits, prob.dtype(), "dlogits");
  detail::check_dtype("cross_entropy2d_backward", dloss, prob.dtype(), "dloss");
  detail::check_dtype("cross_entropy2d_backward", total_weight, DType::kFloat64, "total_weight");
  detail::check_same_device("cross_entropy2d_backward", prob.device(),
                            {&dloss, &prob, &target, &weight, &total_weight, &dlogits});
  HPCNET_DISPATCH(prob.device(), cross_entropy2d_backward, dloss, prob, target, weight,
                  total_weight, ignore_index, dlogits);
}
void dice_loss_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, double smooth, double eps, Tensor& loss, Tensor& prob,
                       Tensor& coef) {
  check_dense_targets(op_name::dice_loss, logits, target, weight);
  HPCNET_REQUIRE(smooth >= 0 && eps > 0, "dice_loss: need smooth >= 0 and eps > 0, got smooth " +
                                             num(smooth) + " and eps " + num(eps));
  detail::check_shape(op_name::dice_loss, prob, logits.shape(), "prob");
  detail::check_dtype(op_name::dice_loss, prob, logits.dtype(), "prob");
  detail::check_dtype(op_name::dice_loss, loss, logits.dtype(), "loss");
  detail::check_shape(op_name::dice_loss, coef, {2, logits.size(1)}, "coef");
  detail::check_dtype(op_name::dice_loss, coef, DType::kFloat64, "coef");
  HPCNET_CHECK(loss.numel() == 1, "dice_loss: loss is 0-d");
  detail::check_same_device(op_name::dice_loss, logits.device(),
                            {&logits, &target, &weight, &loss, &prob, &coef});
  HPCNET_DISPATCH(logits.device(), dice_loss_forward, logits, target, weight, ignore_index, smooth,
                  eps, loss, prob, coef);
}
void dice_loss_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                        const Tensor& coef, int64_t ignore_index, Tensor& dlogits) {
  check_dense_targets("dice_loss_backward", prob, target, Tensor());
  detail::check_shape("dice_loss_backward", dlogits, prob.shape(), "dlogits");
  detail::check_dtype("dice_loss_backward", dlogits, prob.dtype(), "dlogits");
  detail::check_dtype("dice_loss_backward", dloss, prob.dtype(), "dloss");
  detail::check_shape("dice_loss_backward", coef, {2, prob.size(1)}, "coef");
  detail::check_same_device("dice_loss_backward", prob.device(),
                            {&dloss, &prob, &target, &coef, &dlogits});
  HPCNET_DISPATCH(prob.device(), dice_loss_backward, dloss, prob, target, coef, ignore_index,
                  dlogits);
}
void argmax(const Tensor& x, Tensor& out) {
  HPCNET_CHECK(x.dim() == 2, "argmax: input must be (N, C), got " + shape_str(x.shape()));
  detail::check_dtype(op_name::argmax, out, DType::kInt64, "output");
  detail::check_same_device(op_name::argmax, x.device(), {&x, &out});
  HPCNET_DISPATCH(x.device(), argmax, x, out);
}

}  // namespace hpcnet::ops
