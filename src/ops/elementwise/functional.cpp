// Elementwise ops and reductions: relu, silu, sigmoid, add, mul, reshape/flatten (a view), sum,
// mean, with their backward formulas side by side:
//   relu: dx = dy * (y > 0);  add: da = db = dy;  reshape: dx = dy viewed as x;
//   silu: dx = dy s (1 + x (1 - s));  sigmoid: dx = dy y (1 - y);  mul: da = dy b, db = dy a;
//   sum: dx = dy everywhere;  mean: dx = dy / numel.
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct ReluNode : Node {
  Tensor y;
  const char* name() const override { return "ReluBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty_layout(y.shape(), y.dtype(), y.device(), y.layout());
    ops::relu_backward(ops::as_layout(g, y), y, dx);
    return {dx};
  }
  void release() override { y = Tensor(); }
};

struct SiluNode : Node {
  Tensor x;
  const char* name() const override { return "SiluBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
    ops::silu_backward(ops::as_layout(g, x), x, dx);
    return {dx};
  }
  void release() override { x = Tensor(); }
};

struct SigmoidNode : Node {
  Tensor y;
  const char* name() const override { return "SigmoidBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty_layout(y.shape(), y.dtype(), y.device(), y.layout());
    ops::sigmoid_backward(ops::as_layout(g, y), y, dx);
    return {dx};
  }
  void release() override { y = Tensor(); }
};

struct MulNode : Node {
  Tensor a, b;
  const char* name() const override { return "MulBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    Tensor g = g_in.contiguous();
    Tensor da, db;
    if (edges[0].active()) {
      da = Tensor::empty(g.shape(), g.dtype(), g.device());
      ops::mul(g, b, da);
    }
    if (edges[1].active()) {
      db = Tensor::empty(g.shape(), g.dtype(), g.device());
      ops::mul(g, a, db);
    }
    return {da, db};
  }
  void release() override { a = b = Tensor(); }
};

// The checks every float elementwise op makes on its input.
void check_float_input(const char* op, const Tensor& x) {
  HPCNET_CHECK(x.defined(), std::string(op) + ": the input is an undefined tensor");
  HPCNET_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64,
               std::string(op) + ": input must be float32 or float64, got " +
                   dtype_name(x.dtype()) + " " + shape_str(x.shape()));
}

struct AddNode : Node {
  const char* name() const override { return "AddBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g, g}; }
};

struct MulScalarNode : Node {
  double s = 1;
  const char* name() const override { return "MulScalarBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    Tensor g = g_in.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    ops::scale(g, s, dx);
    return {dx};
  }
};

struct ReshapeNode : Node {
  Shape in_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {g.contiguous().view_nograd(in_shape)};
  }
};

struct ReduceNode : Node {
  Shape in_shape;
  DType dtype;
  Device device;
  bool is_mean = false;
  const char* name() const override { return is_mean ? "MeanBackward" : "SumBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(in_shape, dtype, device);
    int64_t n = shape_numel(in_shape);
    ops::fill_like_backward(g.contiguous(), is_mean ? 1.0 / static_cast<double>(n) : 1.0, dx);
    return {dx};
  }
};

Tensor reduce_impl(const Tensor& x_in, bool is_mean) {
  HPCNET_CHECK(x_in.defined(),
               std::string(is_mean ? op_name::mean : op_name::sum) + ": the input is an undefined tensor");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({}, x.dtype(), x.device());
  if (is_mean)
    ops::mean_forward(x, y);
  else
    ops::sum_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<ReduceNode>();
    node->in_shape = x.shape();
    node->dtype = x.dtype();
    node->device = x.device();
    node->is_mean = is_mean;
    record(node, {&x_in}, y);
  }
  return y;
}

}  // namespace

Tensor F::relu(const Tensor& x_in) {
  HPCNET_CHECK(x_in.defined(), "relu: the input is an undefined tensor");
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();  // keeps a blocked layout
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  ops::relu_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<ReluNode>();
    node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    record(node, {&x_in}, y);
  }
  trace::add(op_record::relu, {x_in}, y);
  return y;
}

Tensor F::silu(const Tensor& x_in) {
  check_float_input(op_name::silu, x_in);
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();  // keeps a blocked layout
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  ops::silu_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<SiluNode>();
    node->x = x.detach();
    record(node, {&x_in}, y);
  }
  trace::add(op_record::silu, {x_in}, y);
  return y;
}

Tensor F::sigmoid(const Tensor& x_in) {
  check_float_input(op_name::sigmoid, x_in);
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  ops::sigmoid_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<SigmoidNode>();
    node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    record(node, {&x_in}, y);
  }
  trace::add(op_record::sigmoid, {x_in}, y);
  return y;
}

Tensor F::mul(const Tensor& a_in, const Tensor& b_in) {
  HPCNET_CHECK(a_in.defined() && b_in.defined(), std::string("mul: the ") +
                                                     (a_in.defined() ? "second" : "first") +
                                                     " input is an undefined tensor");
  check_float_input(op_name::mul, a_in);
  HPCNET_CHECK(a_in.shape() == b_in.shape(), "mul: shapes " + shape_str(a_in.shape()) + " and " +
                                                 shape_str(b_in.shape()) + " differ");
  HPCNET_CHECK(a_in.dtype() == b_in.dtype(), std::string("mul: dtypes ") +
                                                 dtype_name(a_in.dtype()) + " and " +
                                                 dtype_name(b_in.dtype()) + " differ");
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  ops::mul(a, b, y);
  if (any_requires_grad({&a_in, &b_in})) {
    auto node = std::make_shared<MulNode>();
    node->a = a.detach();
    node->b = b.detach();
    record(node, {&a_in, &b_in}, y);
  }
  trace::add(op_record::mul, {a_in, b_in}, y);
  return y;
}

Tensor F::mul_scalar(const Tensor& x_in, double s) {
  HPCNET_CHECK(x_in.defined(), "mul_scalar: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
               std::string("mul_scalar: input must be float32 or float64, got ") +
                   dtype_name(x_in.dtype()) + " " + shape_str(x_in.shape()));
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::scale(x, s, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<MulScalarNode>();
    node->s = s;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::mul_scalar, {x_in}, y, {{"s", s}});
  return y;
}

Tensor F::add(const Tensor& a_in, const Tensor& b_in) {
  HPCNET_CHECK(a_in.defined() && b_in.defined(), std::string("add: the ") +
                                                     (a_in.defined() ? "second" : "first") +
                                                     " input is an undefined tensor");
  HPCNET_CHECK(a_in.shape() == b_in.shape(), "add: shapes " + shape_str(a_in.shape()) + " and " +
                                                 shape_str(b_in.shape()) + " differ");
  Tensor a = a_in.is_dense() ? a_in : a_in.contiguous();
  Tensor b = ops::as_layout(b_in, a);
  Tensor y = Tensor::empty_layout(a.shape(), a.dtype(), a.device(), a.layout());
  ops::add(a, b, y);
  if (any_requires_grad({&a_in, &b_in})) record(std::make_shared<AddNode>(), {&a_in, &b_in}, y);
  trace::add(op_record::add, {a_in, b_in}, y);
  return y;
}

Tensor F::reshape(const Tensor& x_in, const Shape& shape) {
  HPCNET_CHECK(x_in.defined(), "reshape: the input is an undefined tensor");
  int64_t known = 1, inferred = 0;  // the product of the given sizes; how many are -1
  bool negative = false;
  for (int64_t s : shape) {
    if (s == -1)
      ++inferred;
    else
      known *= s;
    negative = negative || s < -1;
  }
  const int64_t n = x_in.numel();
  HPCNET_CHECK(!negative && inferred <= 1 && (inferred ? known > 0 && n % known == 0 : known == n),
               "reshape: shape " + shape_str(shape) + " is invalid for input of shape " +
                   shape_str(x_in.shape()) + " (sizes >= 0, at most one -1, and as many elements)");
  Tensor x = x_in.contiguous();
  Tensor y = x.view_nograd(shape);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<ReshapeNode>();
    node->in_shape = x.shape();
    record(node, {&x_in}, y);
  }
  trace::add(op_record::reshape, {x_in}, y);
  return y;
}

Tensor F::flatten(const Tensor& x, int64_t start_dim) {
  int64_t nd = x.dim();
  if (start_dim < 0) start_dim += nd;
  HPCNET_CHECK(start_dim >= 0 && start_dim < std::max<int64_t>(nd, 1),
               "flatten: start_dim out of range for shape " + shape_str(x.shape()));
  Shape s(x.shape().begin(), x.shape().begin() + start_dim);
  s.push_back(-1);
  return reshape(x, s);
}

Tensor F::sum(const Tensor& x) { return reduce_impl(x, false); }
Tensor F::mean(const Tensor& x) { return reduce_impl(x, true); }

}  // namespace hpcnet
