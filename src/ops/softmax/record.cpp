// The record of softmax (src/ops/op_record.h): name and ONNX mapping, Softmax with the traced
// (non-negative) axis (opset 13 and later: over that one axis, as torch.softmax).
#include <string>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_softmax(OnnxGraph& b, const trace::Record& r) {
  const std::string y = b.fresh(r.op);
  attr_int(b.node("Softmax", {onnx_input(b, r, 0)}, {y}), "axis", onnx_int_attr(r, "dim"));
  return y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord softmax{op_name::softmax, {.emit = ops::emit_softmax}};

}  // namespace hpcnet::op_record
