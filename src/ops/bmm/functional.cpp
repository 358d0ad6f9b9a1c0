// bmm (torch.bmm, with either operand's last two dims transposed first): F::bmm and its autograd
// node, the backward beside the forward as two more products through the same kernel. With
// c = op(a) op(b):
//   da = dc op(b)^T = bmm(dc, b, false, !tb)        (a not transposed)
//   da = op(b) dc^T = bmm(b, dc, tb, true)           (a transposed)
//   db = op(a)^T dc = bmm(a, dc, !ta, false)         (b not transposed)
//   db = dc^T op(a) = bmm(dc, a, true, ta)           (b transposed)
#include "hpcnet/functional.h"

#include <memory>
#include <string>

#include "hpcnet/autograd.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

Tensor product(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t m = ta ? a.size(2) : a.size(1), n = tb ? b.size(1) : b.size(2);
  Tensor c = Tensor::empty({a.size(0), m, n}, a.dtype(), a.device());
  ops::bmm(a, b, c, ta, tb);
  return c;
}

struct BmmNode : Node {
  Tensor a, b;  // contiguous
  bool ta = false, tb = false;
  const char* name() const override { return "BmmBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dc = g.contiguous();
    Tensor da, db;
    if (edges[0].active()) da = ta ? product(b, dc, tb, true) : product(dc, b, false, !tb);
    if (edges[1].active()) db = tb ? product(dc, a, true, ta) : product(a, dc, !ta, false);
    return {da, db};
  }
  void release() override { a = b = Tensor(); }
};

// "(B, M, K)" of an operand as the product reads it.
std::string as_read(const Tensor& t, bool transposed) {
  return transposed ? shape_str(t.shape()) + " transposed to " +
                          shape_str({t.size(0), t.size(2), t.size(1)})
                    : shape_str(t.shape());
}

}  // namespace

Tensor F::bmm(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b) {
  const std::string op = op_name::bmm;
  HPCNET_REQUIRE(a_in.defined() && b_in.defined(),
                 op + ": " + (a_in.defined() ? "b" : "a") + " is an undefined tensor");
  HPCNET_REQUIRE(a_in.dim() == 3 && b_in.dim() == 3,
                 op + ": a and b must be 3-D (batch, rows, cols), got " + shape_str(a_in.shape()) +
                     " and " + shape_str(b_in.shape()));
  HPCNET_REQUIRE(a_in.dtype() == DType::kFloat32 || a_in.dtype() == DType::kFloat64,
                 op + ": a must be float32 or float64, got " + dtype_name(a_in.dtype()) + " " +
                     shape_str(a_in.shape()));
  HPCNET_REQUIRE(b_in.dtype() == a_in.dtype(), op + ": b is " + dtype_name(b_in.dtype()) +
                                                   " but a is " + dtype_name(a_in.dtype()));
  HPCNET_REQUIRE(b_in.device() == a_in.device(),
                 op + ": b is on " + b_in.device().str() + " but a is on " + a_in.device().str());
  HPCNET_REQUIRE(
      a_in.size(0) == b_in.size(0),
      op + ": batch sizes differ: a " + shape_str(a_in.shape()) + ", b " + shape_str(b_in.shape()));
  const int64_t k = transpose_a ? a_in.size(1) : a_in.size(2);
  const int64_t kb = transpose_b ? b_in.size(2) : b_in.size(1);
  HPCNET_REQUIRE(k == kb, op + ": inner sizes differ: a " + as_read(a_in, transpose_a) +
                              " cannot multiply b " + as_read(b_in, transpose_b));
  Tensor a = a_in.contiguous(), b = b_in.contiguous();  // views (narrow of a reshape) copied
  Tensor c = product(a, b, transpose_a, transpose_b);
  if (any_requires_grad({&a_in, &b_in})) {
    auto node = std::make_shared<BmmNode>();
    node->a = a.detach();
    node->b = b.detach();
    node->ta = transpose_a;
    node->tb = transpose_b;
    record(node, {&a_in, &b_in}, c);
  }
  trace::add(op_record::bmm, {a_in, b_in}, c,
             {{"transpose_a", transpose_a ? 1.0 : 0.0}, {"transpose_b", transpose_b ? 1.0 : 0.0}});
  return c;
}

}  // namespace hpcnet
