// softmax (torch.softmax(x, dim)): F::softmax and its autograd node, the backward beside the
// forward: dx = y (dy - sum(dy y, dim)) from the forward output y (math.h).
#include "hpcnet/functional.h"

#include <memory>
#include <string>

#include "hpcnet/autograd.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct SoftmaxNode : Node {
  Tensor y;  // the forward output, row-major (rank >= 1: a 0-d one seen as (1,))
  Shape in_shape;
  int64_t dim = 0;
  const char* name() const override { return "SoftmaxBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    ops::softmax_backward(g.contiguous().view_nograd(y.shape()), y, dx, dim);
    return {dx.view_nograd(in_shape)};
  }
  void release() override { y = Tensor(); }
};

}  // namespace

Tensor F::softmax(const Tensor& x_in, int64_t dim_in) {
  const std::string op = op_name::softmax;
  HPCNET_REQUIRE(x_in.defined(), op + ": the input is an undefined tensor");
  HPCNET_REQUIRE(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
                 op + ": input must be float32 or float64, got " + dtype_name(x_in.dtype()) + " " +
                     shape_str(x_in.shape()));
  const int64_t rank = std::max<int64_t>(x_in.dim(), 1);  // a 0-d tensor has dims 0 and -1
  HPCNET_REQUIRE(dim_in >= -rank && dim_in < rank,
                 op + ": dim " + std::to_string(dim_in) + " is out of range for input " +
                     shape_str(x_in.shape()) + " (expected " + std::to_string(-rank) +
                     " <= dim < " + std::to_string(rank) + ")");
  const int64_t dim = dim_in < 0 ? dim_in + rank : dim_in;
  Tensor x = x_in.contiguous();  // row-major (a blocked input is converted)
  if (x.dim() == 0) x = x.view_nograd({1});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::softmax_forward(x, y, dim);
  if (x_in.dim() == 0) y = y.view_nograd({});
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<SoftmaxNode>();
    node->y = y.detach().view_nograd(x.shape());
    node->in_shape = x_in.shape();
    node->dim = dim;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::softmax, {x_in}, y, {{"dim", static_cast<double>(dim)}});
  return y;
}

}  // namespace hpcnet
