// The records of the elementwise ops and reductions (src/ops/op_record.h): names and ONNX
// mappings.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_relu(OnnxGraph& b, const trace::Record& r) {
  return onnx_node(b, "Relu", op_name::relu, {onnx_input(b, r, 0)});
}
std::string emit_add(OnnxGraph& b, const trace::Record& r) {
  return onnx_node(b, "Add", r.op, {onnx_input(b, r, 0), onnx_input(b, r, 1)});
}
std::string emit_mul_scalar(OnnxGraph& b, const trace::Record& r) {
  const std::string s = b.const_f32("scale", {static_cast<float>(r.attrs.at("s"))}, true);
  return onnx_node(b, "Mul", op_name::mul, {onnx_input(b, r, 0), s});
}
// Flatten for flatten(x, 1), else Reshape keeping dim 0 (0) or inferring it (-1).
std::string emit_reshape(OnnxGraph& b, const trace::Record& r) {
  const Shape& from = r.inputs.at(0).shape();
  const Shape& to = r.output.shape();
  const std::string y = b.fresh(r.op);
  if (to.size() == 2 && !from.empty() && to[0] == from[0]) {  // flatten(x, 1)
    attr_int(b.node("Flatten", {onnx_input(b, r, 0)}, {y}), "axis", 1);
    return y;
  }
  std::vector<int64_t> dims(to.begin(), to.end());
  // 0 keeps dim 0; another dim 0 (a batch folded into or out of it: YOLO11's attention heads,
  // (B, C, H, W) <-> (B nh, c, N)) is -1, inferred from the other dims, so any batch size runs.
  if (!from.empty() && !dims.empty()) dims[0] = dims[0] == from[0] ? 0 : -1;
  b.node("Reshape", {onnx_input(b, r, 0), b.const_i64("shape", dims)}, {y});
  return y;
}
// Opset 17 has no SiLU: x * sigmoid(x), as torch.onnx writes it.
std::string emit_silu(OnnxGraph& b, const trace::Record& r) {
  const std::string x = onnx_input(b, r, 0), s = b.fresh(op_name::sigmoid), y = b.fresh(r.op);
  b.node("Sigmoid", {x}, {s});
  b.node("Mul", {x, s}, {y});
  return y;
}
std::string emit_sigmoid(OnnxGraph& b, const trace::Record& r) {
  return onnx_node(b, "Sigmoid", r.op, {onnx_input(b, r, 0)});
}
std::string emit_mul(OnnxGraph& b, const trace::Record& r) {
  return onnx_node(b, "Mul", r.op, {onnx_input(b, r, 0), onnx_input(b, r, 1)});
}

constexpr const char* kReduction =
    "a reduction to a scalar, used by losses only (an exported model ends before its loss)";

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord relu{op_name::relu, {.emit = ops::emit_relu}};
const ops::OpRecord add{op_name::add, {.emit = ops::emit_add}};
const ops::OpRecord mul_scalar{op_name::mul_scalar, {.emit = ops::emit_mul_scalar}};
const ops::OpRecord reshape{op_name::reshape, {.emit = ops::emit_reshape}};
const ops::OpRecord sum{op_name::sum, {.not_exportable = ops::kReduction}};
const ops::OpRecord mean{op_name::mean, {.not_exportable = ops::kReduction}};
const ops::OpRecord silu{op_name::silu, {.emit = ops::emit_silu}};
const ops::OpRecord sigmoid{op_name::sigmoid, {.emit = ops::emit_sigmoid}};
const ops::OpRecord mul{op_name::mul, {.emit = ops::emit_mul}};

}  // namespace hpcnet::op_record
