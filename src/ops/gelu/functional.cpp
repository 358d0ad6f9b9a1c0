// gelu (torch.nn.functional.gelu, approximate "none" or "tanh"): F::gelu and its autograd node,
// the backward beside the forward: dx = dy gelu'(x) from the forward input x (math.h).
#include "hpcnet/functional.h"

#include <memory>
#include <string>

#include "hpcnet/autograd.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct GeluNode : Node {
  Tensor x;
  bool tanh_approx = false;
  const char* name() const override { return "GeluBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
    ops::gelu_backward(ops::as_layout(g, x), x, dx, tanh_approx);
    return {dx};
  }
  void release() override { x = Tensor(); }
};

}  // namespace

Tensor F::gelu(const Tensor& x_in, const std::string& approximate) {
  const std::string op = op_name::gelu;
  HPCNET_REQUIRE(x_in.defined(), op + ": the input is an undefined tensor");
  HPCNET_REQUIRE(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
                 op + ": input must be float32 or float64, got " + dtype_name(x_in.dtype()) + " " +
                     shape_str(x_in.shape()));
  HPCNET_REQUIRE(approximate == "none" || approximate == "tanh",
                 op + ": approximate must be 'none' or 'tanh', got '" + approximate + "'");
  const bool tanh_approx = approximate == "tanh";
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();  // keeps a blocked layout
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  ops::gelu_forward(x, y, tanh_approx);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<GeluNode>();
    node->x = x.detach();
    node->tanh_approx = tanh_approx;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::gelu, {x_in}, y, {{"tanh", tanh_approx ? 1.0 : 0.0}});
  return y;
}

}  // namespace hpcnet
