// depthwise_conv2d (torch's conv2d with groups = C and a (C, 1, R, S) weight, Ultralytics'
// DWConv): F::depthwise_conv2d and its autograd node, the backward beside the forward:
//   dx = the transposed depthwise correlation of dy,  dw[c] = corr(x[:, c], dy[:, c]),
//   db[c] = sum of dy[:, c].
#include "hpcnet/functional.h"

#include <memory>
#include <string>

#include "hpcnet/autograd.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct DepthwiseConv2dNode : Node {
  Tensor x, w;  // row-major
  bool has_bias = false;
  ops::Conv2dParams p;
  const char* name() const override { return "DepthwiseConv2dBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dy = g.contiguous();
    Tensor dx, dw, db;
    if (edges[0].active()) {
      dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      ops::depthwise_conv2d_backward_data(dy, w, dx, p);
    }
    if (edges[1].active() || (has_bias && edges[2].active())) {
      dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      if (has_bias) db = Tensor::empty({w.size(0)}, w.dtype(), w.device());
      ops::depthwise_conv2d_backward_weights(x, dy, dw, db, p);
    }
    return {dx, edges[1].active() ? dw : Tensor(), has_bias && edges[2].active() ? db : Tensor()};
  }
  void release() override { x = w = Tensor(); }
};

void check_inputs(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                  int64_t padding, int64_t dilation) {
  const std::string op = op_name::depthwise_conv2d;
  HPCNET_REQUIRE(x.defined() && w.defined(),
                 op + ": the " + (x.defined() ? "weight" : "input") + " is an undefined tensor");
  HPCNET_REQUIRE(stride >= 1 && padding >= 0 && dilation >= 1,
                 op + ": need stride >= 1, padding >= 0 and dilation >= 1, got stride " +
                     std::to_string(stride) + ", padding " + std::to_string(padding) +
                     ", dilation " + std::to_string(dilation));
  HPCNET_REQUIRE(x.dim() == 4, op + ": input must be (N, C, H, W), got " + shape_str(x.shape()));
  HPCNET_REQUIRE(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64,
                 op + ": input must be float32 or float64, got " + dtype_name(x.dtype()) + " " +
                     shape_str(x.shape()));
  HPCNET_REQUIRE(w.dim() == 4 && w.size(0) == x.size(1) && w.size(1) == 1,
                 op + ": weight must be (C, 1, R, S) with C = " + std::to_string(x.size(1)) +
                     " (the input's channels), got " + shape_str(w.shape()));
  HPCNET_REQUIRE(w.dtype() == x.dtype(), op + ": weight is " + dtype_name(w.dtype()) +
                                             " but the input is " + dtype_name(x.dtype()));
  if (b.defined()) {
    HPCNET_REQUIRE(
        b.dim() == 1 && b.size(0) == x.size(1),
        op + ": bias must be (" + std::to_string(x.size(1)) + ",), got " + shape_str(b.shape()));
    HPCNET_REQUIRE(b.dtype() == x.dtype(), op + ": bias is " + dtype_name(b.dtype()) +
                                               " but the input is " + dtype_name(x.dtype()));
  }
  for (const Tensor* t : {&w, &b})
    HPCNET_REQUIRE(!t->defined() || t->device() == x.device(),
                   op + ": " + (t == &w ? "weight" : "bias") + " is on " + t->device().str() +
                       " but the input is on " + x.device().str());
  const bool fits = x.size(2) + 2 * padding >= dilation * (w.size(2) - 1) + 1 &&
                    x.size(3) + 2 * padding >= dilation * (w.size(3) - 1) + 1;
  HPCNET_REQUIRE(fits, op + ": kernel " + shape_str(w.shape()) + " (dilation " +
                           std::to_string(dilation) + ") is larger than the padded input " +
                           shape_str(x.shape()));
}

}  // namespace

Tensor F::depthwise_conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                           int64_t stride, int64_t padding, int64_t dilation) {
  check_inputs(x_in, w_in, b_in, stride, padding, dilation);
  Tensor x = x_in.contiguous();  // row-major (a blocked input is converted)
  Tensor w = w_in.contiguous(), b = b_in.defined() ? b_in.contiguous() : b_in;
  const ops::Conv2dParams p{stride, stride, padding, padding, dilation, dilation};
  Tensor y = Tensor::empty(
      {x.size(0), x.size(1), ops::conv_out_size(x.size(2), w.size(2), stride, padding, dilation),
       ops::conv_out_size(x.size(3), w.size(3), stride, padding, dilation)},
      x.dtype(), x.device());
  ops::depthwise_conv2d_forward(x, w, b, y, p);
  if (any_requires_grad({&x_in, &w_in, &b_in})) {
    auto node = std::make_shared<DepthwiseConv2dNode>();
    node->x = x.detach();
    node->w = w.detach();
    node->has_bias = b.defined();
    node->p = p;
    record(node, {&x_in, &w_in, &b_in}, y);
  }
  trace::add(op_record::depthwise_conv2d, {x_in, w_in, b_in}, y,
             {{"stride", stride}, {"padding", padding}, {"dilation", dilation}});
  return y;
}

}  // namespace hpcnet
