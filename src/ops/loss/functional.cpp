// log_softmax, nll_loss, cross_entropy and argmax over dim 1 of (N, C), and cross_entropy2d
// over dim 1 of (N, C, H, W): dispatching kernels and differentiable wrappers with their backward
// formulas:
//   log_softmax: dx = dy - softmax(x) * rowsum(dy)
//   nll_loss (mean): dlogp[i, t_i] = -dloss / N
//   cross_entropy (mean, smoothing eps): dlogits = dloss * (softmax - (1-eps) onehot - eps/C) / N
//   cross_entropy2d (weighted mean, ignore_index): dlogits = dloss * w[t] / sum(w[t]) *
//   (softmax - onehot) at counted pixels, 0 at ignored ones
#include <cstdio>

#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_table.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace ops {

HPCNET_DEFINE_OP(log_softmax)
HPCNET_DEFINE_OP(nll_loss)
HPCNET_DEFINE_OP(cross_entropy)
HPCNET_DEFINE_OP(cross_entropy2d)
HPCNET_DEFINE_OP(dice_loss)

namespace {
// A double as %g writes it (1e-07, not to_string's 0.000000), for argument errors.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

void check_rows_targets(const char* op, const Tensor& x, const Tensor& target) {
  HPCNET_CHECK(x.dim() == 2,
               std::string(op) + ": input must be (N, C), got " + shape_str(x.shape()));
  HPCNET_CHECK(x.size(0) > 0, std::string(op) + ": empty batch, input " + shape_str(x.shape()));
  detail::check_dtype(op, target, DType::kInt64, "target");
  detail::check_shape(op, target, {x.size(0)}, "target");
  detail::check_same_device(op, x.device(), {&x, &target});
}
bool is_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// The arguments of cross_entropy2d and dice_loss, as InputErrors naming the op and the shapes:
// logits (N, C, H, W) float with C >= 1, target (N, H, W) int64, weight undefined or (C,) of
// logits' dtype.
void check_dense_targets(const std::string& op, const Tensor& logits, const Tensor& target,
                         const Tensor& weight) {
  HPCNET_REQUIRE(logits.defined() && target.defined(),
                 op + ": logits and target must be defined, got an undefined " +
                     (logits.defined() ? "target" : "logits"));
  const std::string shapes =
      " (logits " + shape_str(logits.shape()) + ", target " + shape_str(target.shape()) + ")";
  HPCNET_REQUIRE(logits.dim() == 4, op + ": logits must be (N, C, H, W)" + shapes);
  HPCNET_REQUIRE(logits.size(1) >= 1, op + ": logits need at least one class" + shapes);
  HPCNET_REQUIRE(is_float(logits.dtype()),
                 (op + ": logits must be float32 or float64, got ") + dtype_name(logits.dtype()));
  HPCNET_REQUIRE(target.dtype() == DType::kInt64,
                 (op + ": target must be int64 class indices, got ") + dtype_name(target.dtype()));
  HPCNET_REQUIRE(target.shape() == Shape({logits.size(0), logits.size(2), logits.size(3)}),
                 op + ": target must be (N, H, W) of logits (N, C, H, W)" + shapes);
  if (weight.defined()) {
    HPCNET_REQUIRE(weight.shape() == Shape({logits.size(1)}),
                   op + ": weight must be (C,) = (" + std::to_string(logits.size(1)) + ",), got " +
                       shape_str(weight.shape()));
    HPCNET_REQUIRE(weight.dtype() == logits.dtype(), (op + ": weight has dtype ") +
                                                         dtype_name(weight.dtype()) + ", logits " +
                                                         dtype_name(logits.dtype()));
  }
}
void check_cross_entropy2d(const Tensor& logits, const Tensor& target, const Tensor& weight) {
  check_dense_targets("cross_entropy2d", logits, target, weight);
}
}  // namespace

void log_softmax_forward(const Tensor& x, Tensor& y) {
  HPCNET_CHECK(x.dim() == 2, "log_softmax: input must be (N, C), got " + shape_str(x.shape()));
  detail::check_same_device("log_softmax", x.device(), {&x, &y});
  HPCNET_DISPATCH(x.device(), log_softmax_forward, x, y);
}
void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  detail::check_same_device("log_softmax_backward", dy.device(), {&dy, &y, &dx});
  HPCNET_DISPATCH(dy.device(), log_softmax_backward, dy, y, dx);
}
void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss) {
  check_rows_targets("nll_loss", logp, target);
  HPCNET_DISPATCH(logp.device(), nll_loss_forward, logp, target, loss);
}
void nll_loss_backward(const Tensor& dloss, const Tensor& target, Tensor& dlogp) {
  detail::check_same_device("nll_loss_backward", dlogp.device(), {&dloss, &target, &dlogp});
  HPCNET_DISPATCH(dlogp.device(), nll_loss_backward, dloss, target, dlogp);
}
void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, Tensor& loss,
                           Tensor& prob) {
  check_rows_targets("cross_entropy", logits, target);
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
  detail::check_shape("cross_entropy2d", prob, logits.shape(), "prob");
  detail::check_dtype("cross_entropy2d", prob, logits.dtype(), "prob");
  detail::check_dtype("cross_entropy2d", loss, logits.dtype(), "loss");
  detail::check_dtype("cross_entropy2d", total_weight, DType::kFloat64, "total_weight");
  HPCNET_CHECK(loss.numel() == 1 && total_weight.numel() == 1,
               "cross_entropy2d: loss and total_weight are 0-d");
  detail::check_same_device("cross_entropy2d", logits.device(),
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
  check_dense_targets("dice_loss", logits, target, weight);
  HPCNET_REQUIRE(smooth >= 0 && eps > 0, "dice_loss: need smooth >= 0 and eps > 0, got smooth " +
                                             num(smooth) + " and eps " + num(eps));
  detail::check_shape("dice_loss", prob, logits.shape(), "prob");
  detail::check_dtype("dice_loss", prob, logits.dtype(), "prob");
  detail::check_dtype("dice_loss", loss, logits.dtype(), "loss");
  detail::check_shape("dice_loss", coef, {2, logits.size(1)}, "coef");
  detail::check_dtype("dice_loss", coef, DType::kFloat64, "coef");
  HPCNET_CHECK(loss.numel() == 1, "dice_loss: loss is 0-d");
  detail::check_same_device("dice_loss", logits.device(),
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
  detail::check_dtype("argmax", out, DType::kInt64, "output");
  detail::check_same_device("argmax", x.device(), {&x, &out});
  HPCNET_DISPATCH(x.device(), argmax, x, out);
}

}  // namespace ops

namespace {

struct LogSoftmaxNode : Node {
  Tensor y;
  const char* name() const override { return "LogSoftmaxBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    ops::log_softmax_backward(g.contiguous(), y, dx);
    return {dx};
  }
  void release() override { y = Tensor(); }
};

struct NllLossNode : Node {
  Tensor target;
  Shape in_shape;
  DType dtype;
  Device device;
  const char* name() const override { return "NllLossBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(in_shape, dtype, device);
    ops::nll_loss_backward(g, target, dx);
    return {dx, Tensor()};
  }
  void release() override { target = Tensor(); }
};

struct CrossEntropyNode : Node {
  Tensor prob, target;
  double eps = 0;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(prob.shape(), prob.dtype(), prob.device());
    ops::cross_entropy_backward(g, prob, target, eps, dx);
    return {dx, Tensor()};
  }
  void release() override { prob = target = Tensor(); }
};

struct DiceLossNode : Node {
  Tensor prob, target, coef;
  int64_t ignore_index = 255;
  const char* name() const override { return "DiceLossBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(prob.shape(), prob.dtype(), prob.device());
    ops::dice_loss_backward(g.contiguous(), prob, target, coef, ignore_index, dx);
    return {dx};
  }
  void release() override { prob = target = coef = Tensor(); }
};

struct CrossEntropy2dNode : Node {
  Tensor prob, target, weight, total_weight;
  int64_t ignore_index = 255;
  const char* name() const override { return "CrossEntropy2dBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(prob.shape(), prob.dtype(), prob.device());
    ops::cross_entropy2d_backward(g.contiguous(), prob, target, weight, total_weight, ignore_index,
                                  dx);
    return {dx};
  }
  void release() override { prob = target = weight = total_weight = Tensor(); }
};

}  // namespace

Tensor F::log_softmax(const Tensor& x_in) {
  HPCNET_CHECK(x_in.defined(), "log_softmax: the input is an undefined tensor");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::log_softmax_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<LogSoftmaxNode>();
    node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    record(node, {&x_in}, y);
  }
  trace::add("log_softmax", {x_in}, y);
  return y;
}

Tensor F::nll_loss(const Tensor& logp_in, const Tensor& target) {
  HPCNET_CHECK(logp_in.defined() && target.defined(), std::string("nll_loss: the ") +
                                                          (logp_in.defined() ? "target" : "input") +
                                                          " is an undefined tensor");
  Tensor logp = logp_in.contiguous();
  Tensor loss = Tensor::empty({}, logp.dtype(), logp.device());
  ops::nll_loss_forward(logp, target, loss);
  if (any_requires_grad({&logp_in})) {
    auto node = std::make_shared<NllLossNode>();
    node->target = target;
    node->in_shape = logp.shape();
    node->dtype = logp.dtype();
    node->device = logp.device();
    record(node, {&logp_in, &target}, loss);
  }
  return loss;
}

Tensor F::cross_entropy(const Tensor& logits_in, const Tensor& target, double label_smoothing) {
  HPCNET_CHECK(logits_in.defined() && target.defined(),
               std::string("cross_entropy: the ") + (logits_in.defined() ? "target" : "input") +
                   " is an undefined tensor");
  Tensor logits = logits_in.contiguous();
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  ops::cross_entropy_forward(logits, target, label_smoothing, loss, prob);
  if (any_requires_grad({&logits_in})) {
    auto node = std::make_shared<CrossEntropyNode>();
    node->prob = prob;
    node->target = target;
    node->eps = label_smoothing;
    record(node, {&logits_in, &target}, loss);
  }
  return loss;
}

Tensor F::cross_entropy2d(const Tensor& logits_in, const Tensor& target_in, const Tensor& weight_in,
                          int64_t ignore_index) {
  ops::check_cross_entropy2d(logits_in, target_in, weight_in);
  Tensor logits = logits_in.contiguous();  // blocked activations become row-major
  Tensor target = target_in.contiguous();
  Tensor weight = weight_in.defined() ? weight_in.contiguous().detach() : Tensor();
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor total_weight = Tensor::empty({}, DType::kFloat64, logits.device());
  ops::cross_entropy2d_forward(logits, target, weight, ignore_index, loss, prob, total_weight);
  if (any_requires_grad({&logits_in})) {
    auto node = std::make_shared<CrossEntropy2dNode>();
    node->prob = prob;
    node->target = target;
    node->weight = weight;
    node->total_weight = total_weight;
    node->ignore_index = ignore_index;
    record(node, {&logits_in}, loss);
  }
  return loss;
}

Tensor F::dice_loss(const Tensor& logits_in, const Tensor& target_in, const Tensor& weight_in,
                    int64_t ignore_index, double smooth, double eps) {
  ops::check_dense_targets("dice_loss", logits_in, target_in, weight_in);
  Tensor logits = logits_in.contiguous();  // blocked activations become row-major
  Tensor target = target_in.contiguous();
  Tensor weight = weight_in.defined() ? weight_in.contiguous().detach() : Tensor();
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor coef = Tensor::empty({2, logits.size(1)}, DType::kFloat64, logits.device());
  ops::dice_loss_forward(logits, target, weight, ignore_index, smooth, eps, loss, prob, coef);
  if (any_requires_grad({&logits_in})) {
    auto node = std::make_shared<DiceLossNode>();
    node->prob = prob;
    node->target = target;
    node->coef = coef;
    node->ignore_index = ignore_index;
    record(node, {&logits_in}, loss);
  }
  return loss;
}

Tensor F::argmax(const Tensor& x_in) {
  HPCNET_CHECK(x_in.defined(), "argmax: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 2 && x_in.size(1) >= 1,
               "argmax: input must be (N, C) with C >= 1, got " + shape_str(x_in.shape()));
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty({x.size(0)}, DType::kInt64, x.device());
  ops::argmax(x, out);
  return out;
}

}  // namespace hpcnet
