// The record of gelu (src/ops/op_record.h): name and ONNX mapping. Opset 17 has no Gelu (opset
// 20 does), so it is written out as torch.onnx writes it for opset 17:
//   none: x * 0.5 * (1 + Erf(x / sqrt 2));
//   tanh: x * 0.5 * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x))).
#include <string>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_gelu(OnnxGraph& b, const trace::Record& r) {
  const std::string x = onnx_input(b, r, 0);
  auto scalar = [&](const char* base, float v) { return b.const_f32(base, {v}, true); };
  std::string inner;
  if (onnx_int_attr(r, "tanh")) {
    const std::string x3 = onnx_node(b, "Mul", "x3", {onnx_node(b, "Mul", "x2", {x, x}), x});
    const std::string cubic =
        onnx_node(b, "Add", "cubic", {x, onnx_node(b, "Mul", "cx3", {x3, scalar("c", 0.044715f)})});
    inner = onnx_node(b, "Tanh", "tanh",
                      {onnx_node(b, "Mul", "u", {cubic, scalar("k", 0.7978845608028654f)})});
  } else {
    inner = onnx_node(b, "Erf", "erf",
                      {onnx_node(b, "Div", "x_sqrt2", {x, scalar("sqrt2", 1.4142135623730951f)})});
  }
  const std::string one_plus = onnx_node(b, "Add", "one_plus", {inner, scalar("one", 1.0f)});
  const std::string half_x = onnx_node(b, "Mul", "half_x", {x, scalar("half", 0.5f)});
  return onnx_node(b, "Mul", r.op, {half_x, one_plus});
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord gelu{op_name::gelu, {.emit = ops::emit_gelu}};

}  // namespace hpcnet::op_record
