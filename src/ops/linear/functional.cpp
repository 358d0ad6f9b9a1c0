// linear: F::linear / F::linear_relu (y = x w^T + b), backward beside:
// dx = dy w,  dw = dy^T x,  db = sum over rows of dy; with the fused ReLU, dy is masked first.
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct LinearNode : Node {
  Tensor x, w, y;  // y kept only with the fused ReLU
  bool has_bias = false, relu = false;
  const char* name() const override { return relu ? "LinearReluBackward" : "LinearBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor dy = grad_out.contiguous();
    if (relu) {
      Tensor masked = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      ops::relu_backward(dy, y, masked);
      dy = masked;
    }
    Tensor dx, dw, db;
    if (edges[0].active()) {
      dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      ops::linear_backward_data(dy, w, dx);
    }
    if (edges[1].active() || (has_bias && edges[2].active())) {
      dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      if (has_bias) db = Tensor::empty({w.size(0)}, w.dtype(), w.device());
      ops::linear_backward_weights(x, dy, dw, db);
    }
    return {dx, edges[1].active() ? dw : Tensor(), has_bias && edges[2].active() ? db : Tensor()};
  }
  void release() override { x = w = y = Tensor(); }
};

Tensor linear_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, bool relu) {
  HPCNET_CHECK(x_in.defined() && w_in.defined(), std::string("linear: the ") +
                                                     (x_in.defined() ? "weight" : "input") +
                                                     " is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 2 && w_in.dim() == 2,
               "linear: input must be (N, IN) and weight (OUT, IN), got " +
                   shape_str(x_in.shape()) + " and " + shape_str(w_in.shape()));
  HPCNET_CHECK(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
               std::string("linear: input must be float32 or float64, got ") +
                   dtype_name(x_in.dtype()) + " " + shape_str(x_in.shape()));
  HPCNET_CHECK(x_in.size(1) >= 1, "linear: input " + shape_str(x_in.shape()) + " has no features");
  Tensor x = x_in.contiguous(), w = w_in.contiguous(), b = b_in.defined() ? b_in.contiguous() : b_in;
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, x.dtype(), x.device());
  ops::linear_forward(x, w, b, y, relu);
  if (any_requires_grad({&x_in, &w_in, &b_in})) {
    auto node = std::make_shared<LinearNode>();
    node->x = x;
    node->w = w;
    node->has_bias = b.defined();
    node->relu = relu;
    if (relu) node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    record(node, {&x_in, &w_in, &b_in}, y);
  }
  trace::add(op_record::linear, {x_in, w_in, b_in}, y, {{op_name::relu, relu}});
  return y;
}

}  // namespace

Tensor F::linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_impl(x, w, b, false);
}
Tensor F::linear_relu(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_impl(x, w, b, true);
}

}  // namespace hpcnet
