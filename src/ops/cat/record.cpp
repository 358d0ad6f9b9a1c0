// The records of cat and narrow (src/ops/op_record.h): names and ONNX mappings.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_cat(OnnxGraph& b, const trace::Record& r) {
  std::vector<std::string> inputs;
  for (size_t i = 0; i < r.inputs.size(); ++i) inputs.push_back(onnx_input(b, r, i));
  const std::string y = b.fresh(r.op);
  attr_int(b.node("Concat", inputs, {y}), "axis", onnx_int_attr(r, "dim"));
  return y;
}
std::string emit_narrow(OnnxGraph& b, const trace::Record& r) {
  const int64_t start = onnx_int_attr(r, "start");
  const std::string y = b.fresh(r.op);
  b.node("Slice",
         {onnx_input(b, r, 0), b.const_i64("starts", {start}),
          b.const_i64("ends", {start + onnx_int_attr(r, "length")}),
          b.const_i64("axes", {onnx_int_attr(r, "dim")})},
         {y});
  return y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord cat{op_name::cat, {.emit = ops::emit_cat}};
const ops::OpRecord narrow{op_name::narrow, {.emit = ops::emit_narrow}};

}  // namespace hpcnet::op_record
