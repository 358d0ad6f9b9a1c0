// The record of bmm (src/ops/op_record.h): name and ONNX mapping, MatMul (batched over the first
// dim), each operand flagged transposed going through Transpose(perm = 0, 2, 1) first.
#include <string>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_bmm(OnnxGraph& b, const trace::Record& r) {
  auto operand = [&](size_t i, const char* flag) {
    const std::string v = onnx_input(b, r, i);
    if (!onnx_int_attr(r, flag)) return v;
    const std::string t = b.fresh(std::string(r.op) + "_" + flag);
    attr_ints(b.node("Transpose", {v}, {t}), "perm", {0, 2, 1});
    return t;
  };
  const std::string lhs = operand(0, "transpose_a"), rhs = operand(1, "transpose_b");
  return onnx_node(b, "MatMul", r.op, {lhs, rhs});
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord bmm{op_name::bmm, {.emit = ops::emit_bmm}};

}  // namespace hpcnet::op_record
