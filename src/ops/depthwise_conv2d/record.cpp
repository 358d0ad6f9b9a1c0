// The record of depthwise_conv2d (src/ops/op_record.h): name and ONNX mapping, Conv with
// group = C (the weight (C, 1, R, S) is ONNX's grouped layout as it stands), bias when traced
// with one.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_depthwise_conv(OnnxGraph& b, const trace::Record& r) {
  const Tensor& w = r.inputs.at(1);
  const int64_t s = onnx_int_attr(r, "stride"), p = onnx_int_attr(r, "padding"),
                d = onnx_int_attr(r, "dilation");
  std::vector<std::string> inputs = {onnx_input(b, r, 0), onnx_input(b, r, 1)};
  if (std::string bias = onnx_optional_input(b, r, 2); !bias.empty()) inputs.push_back(bias);
  const std::string y = b.fresh(r.op);
  OnnxNode& n = b.node("Conv", inputs, {y});
  attr_ints(n, "kernel_shape", {w.size(2), w.size(3)});
  attr_ints(n, "strides", {s, s});
  attr_ints(n, "pads", {p, p, p, p});
  attr_ints(n, "dilations", {d, d});
  attr_int(n, "group", w.size(0));
  return y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord depthwise_conv2d{op_name::depthwise_conv2d, {.emit = ops::emit_depthwise_conv}};

}  // namespace hpcnet::op_record
