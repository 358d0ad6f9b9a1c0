// The records of the softmax family and the losses (src/ops/op_record.h): names and ONNX
// mappings.
#include <string>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

std::string emit_log_softmax(OnnxGraph& b, const trace::Record& r) {
  const std::string y = b.fresh(r.op);
  attr_int(b.node("LogSoftmax", {onnx_input(b, r, 0)}, {y}), "axis", 1);
  return y;
}

constexpr const char* kLoss = "a training loss (an exported model ends before its loss)";

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord log_softmax{op_name::log_softmax, {.emit = ops::emit_log_softmax}};
const ops::OpRecord nll_loss{op_name::nll_loss, {.not_exportable = ops::kLoss}};
const ops::OpRecord cross_entropy{op_name::cross_entropy, {.not_exportable = ops::kLoss}};
const ops::OpRecord cross_entropy2d{op_name::cross_entropy2d, {.not_exportable = ops::kLoss}};
const ops::OpRecord dice_loss{op_name::dice_loss, {.not_exportable = ops::kLoss}};

}  // namespace hpcnet::op_record
