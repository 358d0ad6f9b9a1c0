// log_softmax, nll_loss, cross_entropy and argmax over dim 1 of (N, C): dispatching kernels and
// differentiable wrappers with their backward formulas:
//   log_softmax: dx = dy - softmax(x) * rowsum(dy)
//   nll_loss (mean): dlogp[i, t_i] = -dloss / N
//   cross_entropy (mean, smoothing eps): dlogits = dloss * (softmax - (1-eps) onehot - eps/C) / N
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_table.h"

namespace hpcnet {
namespace ops {

HPCNET_DEFINE_OP(log_softmax)
HPCNET_DEFINE_OP(nll_loss)
HPCNET_DEFINE_OP(cross_entropy)

namespace {
void check_rows_targets(const char* op, const Tensor& x, const Tensor& target) {
  HPCNET_CHECK(x.dim() == 2, std::string(op) + ": input must be (N, C), got " + shape_str(x.shape()));
  HPCNET_CHECK(x.size(0) > 0, std::string(op) + ": empty batch");
  detail::check_dtype(op, target, DType::kInt64, "target");
  detail::check_shape(op, target, {x.size(0)}, "target");
  detail::check_same_device(op, x.device(), {&x, &target});
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
  HPCNET_CHECK(eps >= 0 && eps <= 1, "cross_entropy: label_smoothing must be in [0, 1]");
  HPCNET_DISPATCH(logits.device(), cross_entropy_forward, logits, target, eps, loss, prob);
}
void cross_entropy_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                            double eps, Tensor& dlogits) {
  detail::check_same_device("cross_entropy_backward", prob.device(), {&dloss, &prob, &target, &dlogits});
  HPCNET_DISPATCH(prob.device(), cross_entropy_backward, dloss, prob, target, eps, dlogits);
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

}  // namespace

Tensor F::log_softmax(const Tensor& x_in) {
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::log_softmax_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<LogSoftmaxNode>();
    node->y = y;
    record(node, {&x_in}, y);
  }
  return y;
}

Tensor F::nll_loss(const Tensor& logp_in, const Tensor& target) {
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

Tensor F::argmax(const Tensor& x_in) {
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty({x.size(0)}, DType::kInt64, x.device());
  ops::argmax(x, out);
  return out;
}

}  // namespace hpcnet
