// The record of max_pool2d (src/ops/op_record.h): name and ONNX mapping.
#include <string>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_max_pool2d(OnnxGraph& b, const trace::Record& r) {
  const int64_t k = onnx_int_attr(r, "kernel_size"), s = onnx_int_attr(r, "stride"),
                p = onnx_int_attr(r, "padding");
  const std::string y = b.fresh(r.op);
  OnnxNode& n = b.node("MaxPool", {onnx_input(b, r, 0)}, {y});
  attr_ints(n, "kernel_shape", {k, k});
  attr_ints(n, "strides", {s, s});
  attr_ints(n, "pads", {p, p, p, p});
  return y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord max_pool2d{op_name::max_pool2d, {.emit = ops::emit_max_pool2d}};

}  // namespace hpcnet::op_record
