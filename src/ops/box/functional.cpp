// The detection losses' differentiable pieces (Ultralytics' v8DetectionLoss is built from them in
// src/task/detect/): summed BCE with logits, the gather of foreground anchor columns, the DFL
// softmax expectation, the weighted CIoU loss and the distribution focal loss. The F::
// wrappers and backward nodes side by side (their kernel API: kernels.cpp):
//   bce:    dx = g (sigmoid(x) - t);   gather: dx = scatter-add of dy;
//   expect: dx_j = dy p_j (j - E);     dfl:    dx_j = g w (p_j - wl [j = l] - wr [j = l + 1]);
//   ciou:   dpred = -g w dCIoU/dpred with alpha held constant (Ultralytics' no_grad alpha).
// Targets and weights are constants (no gradient), as in Ultralytics.
#include <string>

#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

// InputError unless t is defined, float32/float64 (or `dtype` when given) and of rank `rank`.
void check_arg(const char* op, const Tensor& t, const char* what, int64_t rank,
               const char* shape_doc) {
  HPCNET_CHECK(t.defined(), std::string(op) + ": " + what + " is an undefined tensor");
  HPCNET_CHECK(t.dim() == rank, std::string(op) + ": " + what + " must be " + shape_doc +
                                    ", got " + shape_str(t.shape()));
}
void check_float(const char* op, const Tensor& t, const char* what) {
  HPCNET_CHECK(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64,
               std::string(op) + ": " + what + " must be float32 or float64, got " +
                   dtype_name(t.dtype()) + " " + shape_str(t.shape()));
}
void check_like(const char* op, const Tensor& t, const Tensor& like, const char* what,
                const Shape& want) {
  HPCNET_CHECK(t.defined(), std::string(op) + ": " + what + " is an undefined tensor");
  HPCNET_CHECK(t.shape() == want, std::string(op) + ": " + what + " must be " + shape_str(want) +
                                      ", got " + shape_str(t.shape()));
  HPCNET_CHECK(t.dtype() == like.dtype(), std::string(op) + ": " + what + " must be " +
                                              dtype_name(like.dtype()) + " like the input, got " +
                                              dtype_name(t.dtype()));
}

struct BceNode : Node {
  Tensor x, t;
  const char* name() const override { return "BceWithLogitsBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    ops::bce_with_logits_backward(g.contiguous(), x, t, dx);
    return {dx};
  }
  void release() override { x = t = Tensor(); }
};

struct GatherAnchorsNode : Node {
  Tensor idx;
  Shape in_shape;
  const char* name() const override { return "GatherAnchorsBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device());
    ops::gather_anchors_backward(g.contiguous(), idx, dx);
    return {dx};
  }
  void release() override { idx = Tensor(); }
};

struct DflExpectNode : Node {
  Tensor x;
  const char* name() const override { return "DflExpectBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    ops::dfl_expect_backward(g.contiguous(), x, dx);
    return {dx};
  }
  void release() override { x = Tensor(); }
};

struct CiouLossNode : Node {
  Tensor pred, target, weight;
  bool alpha_grad = false;
  const char* name() const override { return "CiouLossBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dp = Tensor::empty(pred.shape(), pred.dtype(), pred.device());
    ops::ciou_loss_backward(g.contiguous(), pred, target, weight, alpha_grad, dp);
    return {dp};
  }
  void release() override { pred = target = weight = Tensor(); }
};

struct DflLossNode : Node {
  Tensor pred, target, weight;
  const char* name() const override { return "DflLossBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dp = Tensor::empty(pred.shape(), pred.dtype(), pred.device());
    ops::dfl_loss_backward(g.contiguous(), pred, target, weight, dp);
    return {dp};
  }
  void release() override { pred = target = weight = Tensor(); }
};

}  // namespace

Tensor F::bce_with_logits(const Tensor& logits, const Tensor& target_in) {
  HPCNET_CHECK(logits.defined(), "bce_with_logits: logits is an undefined tensor");
  check_float(op_name::bce_with_logits, logits, "logits");
  check_like(op_name::bce_with_logits, target_in, logits, "target", logits.shape());
  Tensor x = logits.contiguous(), t = target_in.contiguous().detach();
  Tensor loss = Tensor::empty({}, x.dtype(), x.device());
  ops::bce_with_logits_forward(x, t, loss);
  if (any_requires_grad({&logits})) {
    auto node = std::make_shared<BceNode>();
    node->x = x.detach();
    node->t = t;
    record(node, {&logits}, loss);
  }
  trace::add(op_record::bce_with_logits, {logits, target_in}, loss);
  return loss;
}

Tensor F::gather_anchors(const Tensor& x_in, const Tensor& idx_in) {
  check_arg(op_name::gather_anchors, x_in, "input", 3, "(B, C, A)");
  check_float(op_name::gather_anchors, x_in, "input");
  check_arg(op_name::gather_anchors, idx_in, "idx", 1, "(M,)");
  HPCNET_CHECK(idx_in.dtype() == DType::kInt64,
               std::string("gather_anchors: idx must be int64, got ") +
                   dtype_name(idx_in.dtype()));
  const int64_t BA = x_in.size(0) * x_in.size(2);
  Tensor idx = idx_in.contiguous();
  if (idx.device().is_cpu()) {  // CUDA indices are trusted (checking would synchronise)
    const int64_t* pi = idx.data<int64_t>();
    for (int64_t m = 0; m < idx.numel(); ++m)
      HPCNET_CHECK(pi[m] >= 0 && pi[m] < BA,
                   "gather_anchors: idx[" + std::to_string(m) + "] = " + std::to_string(pi[m]) +
                       " is outside [0, B A = " + std::to_string(BA) + ") for input " +
                       shape_str(x_in.shape()));
  }
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({idx.numel(), x.size(1)}, x.dtype(), x.device());
  ops::gather_anchors_forward(x, idx, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<GatherAnchorsNode>();
    node->idx = idx;
    node->in_shape = x.shape();
    record(node, {&x_in}, y);
  }
  trace::add(op_record::gather_anchors, {x_in, idx_in}, y);
  return y;
}

Tensor F::dfl_expect(const Tensor& x_in) {
  check_arg(op_name::dfl_expect, x_in, "input", 2, "(N, R)");
  check_float(op_name::dfl_expect, x_in, "input");
  HPCNET_CHECK(x_in.size(1) >= 1, "dfl_expect: need at least one bin, got input " +
                                      shape_str(x_in.shape()));
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({x.size(0)}, x.dtype(), x.device());
  ops::dfl_expect_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<DflExpectNode>();
    node->x = x.detach();
    record(node, {&x_in}, y);
  }
  trace::add(op_record::dfl_expect, {x_in}, y);
  return y;
}

Tensor F::ciou_loss(const Tensor& pred_in, const Tensor& target_in, const Tensor& weight_in,
                    bool alpha_grad) {
  check_arg(op_name::ciou_loss, pred_in, "pred", 2, "(M, 4)");
  check_float(op_name::ciou_loss, pred_in, "pred");
  HPCNET_CHECK(pred_in.size(1) == 4,
               "ciou_loss: pred must be (M, 4) xyxy boxes, got " + shape_str(pred_in.shape()));
  const int64_t M = pred_in.size(0);
  check_like(op_name::ciou_loss, target_in, pred_in, "target", {M, 4});
  check_like(op_name::ciou_loss, weight_in, pred_in, "weight", {M});
  Tensor pred = pred_in.contiguous(), target = target_in.contiguous().detach(),
         weight = weight_in.contiguous().detach();
  Tensor loss = Tensor::empty({}, pred.dtype(), pred.device());
  ops::ciou_loss_forward(pred, target, weight, loss);
  if (any_requires_grad({&pred_in})) {
    auto node = std::make_shared<CiouLossNode>();
    node->pred = pred.detach();
    node->target = target;
    node->weight = weight;
    node->alpha_grad = alpha_grad;
    record(node, {&pred_in}, loss);
  }
  trace::add(op_record::ciou_loss, {pred_in, target_in, weight_in}, loss);
  return loss;
}

Tensor F::dfl_loss(const Tensor& pred_in, const Tensor& target_in, const Tensor& weight_in) {
  check_arg(op_name::dfl_loss, pred_in, "pred", 2, "(N, R)");
  check_float(op_name::dfl_loss, pred_in, "pred");
  HPCNET_CHECK(pred_in.size(1) >= 2,
               "dfl_loss: need at least two bins, got pred " + shape_str(pred_in.shape()));
  const int64_t N = pred_in.size(0);
  check_like(op_name::dfl_loss, target_in, pred_in, "target", {N});
  check_like(op_name::dfl_loss, weight_in, pred_in, "weight", {N});
  Tensor pred = pred_in.contiguous(), target = target_in.contiguous().detach(),
         weight = weight_in.contiguous().detach();
  Tensor loss = Tensor::empty({}, pred.dtype(), pred.device());
  ops::dfl_loss_forward(pred, target, weight, loss);
  if (any_requires_grad({&pred_in})) {
    auto node = std::make_shared<DflLossNode>();
    node->pred = pred.detach();
    node->target = target;
    node->weight = weight;
    record(node, {&pred_in}, loss);
  }
  trace::add(op_record::dfl_loss, {pred_in, target_in, weight_in}, loss);
  return loss;
}

}  // namespace hpcnet
