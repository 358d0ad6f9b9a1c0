// log_softmax, nll_loss, cross_entropy and argmax over dim 1 of (N, C), and cross_entropy2d
// over dim 1 of (N, C, H, W): differentiable wrappers with their backward
// formulas:
//   log_softmax: dx = dy - softmax(x) * rowsum(dy)
//   nll_loss (mean): dlogp[i, t_i] = -dloss / N
//   cross_entropy (mean, smoothing eps): dlogits = dloss * (softmax - (1-eps) onehot - eps/C) / N
//   cross_entropy2d (weighted mean, ignore_index): dlogits = dloss * w[t] / sum(w[t]) *
//   (softmax - onehot) at counted pixels, 0 at ignored ones
#include <cstdio>

#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/loss/checks.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
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
  trace::add(op_record::log_softmax, {x_in}, y);
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
  ops::check_dense_targets(op_name::dice_loss, logits_in, target_in, weight_in);
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
