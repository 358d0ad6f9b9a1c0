// The record of linear (src/ops/op_record.h): name and ONNX mapping.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

// Gemm (transB = 1), then Relu when traced with relu = 1.
std::string emit_linear(OnnxGraph& b, const trace::Record& r) {
  std::vector<std::string> inputs = {onnx_input(b, r, 0), onnx_input(b, r, 1)};
  if (std::string bias = onnx_optional_input(b, r, 2); !bias.empty()) inputs.push_back(bias);
  const std::string y = b.fresh(r.op);
  attr_int(b.node("Gemm", inputs, {y}), "transB", 1);
  return onnx_fused_relu(b, r, y);
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord linear{op_name::linear, {.emit = ops::emit_linear}};

}  // namespace hpcnet::op_record
