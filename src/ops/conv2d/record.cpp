// The records of conv2d and conv_transpose2d (src/ops/op_record.h): names and ONNX mappings.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

// Conv or ConvTranspose (bias when traced with one), then Relu when traced with relu = 1.
std::string emit_conv(OnnxGraph& b, const trace::Record& r) {
  const Tensor& w = r.inputs.at(1);
  const int64_t s = onnx_int_attr(r, "stride"), p = onnx_int_attr(r, "padding"),
                d = onnx_int_attr(r, "dilation");
  std::vector<std::string> inputs = {onnx_input(b, r, 0), onnx_input(b, r, 1)};
  if (std::string bias = onnx_optional_input(b, r, 2); !bias.empty()) inputs.push_back(bias);
  const bool transposed = r.record == &op_record::conv_transpose2d;
  std::string y = b.fresh(r.op);
  OnnxNode& n = b.node(transposed ? "ConvTranspose" : "Conv", inputs, {y});
  attr_ints(n, "kernel_shape", {w.size(2), w.size(3)});
  attr_ints(n, "strides", {s, s});
  attr_ints(n, "pads", {p, p, p, p});
  attr_ints(n, "dilations", {d, d});
  attr_int(n, "group", 1);
  if (transposed) {
    const int64_t op_pad = onnx_int_attr(r, "output_padding");
    attr_ints(n, "output_padding", {op_pad, op_pad});
  }
  return onnx_fused_relu(b, r, y);
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord conv2d{op_name::conv2d, {.emit = ops::emit_conv}};
const ops::OpRecord conv_transpose2d{op_name::conv_transpose2d, {.emit = ops::emit_conv}};

}  // namespace hpcnet::op_record
