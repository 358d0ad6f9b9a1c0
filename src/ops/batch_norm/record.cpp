// The record of batch_norm (src/ops/op_record.h; F::batch_norm_act and sync_batch_norm_act trace
// it too): name and ONNX mapping.
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

// BatchNormalization from the running statistics (eval mode), + residual, then Relu when traced
// with relu = 1.
std::string emit_batch_norm(OnnxGraph& b, const trace::Record& r) {
  HPCNET_REQUIRE(onnx_int_attr(r, "training") == 0,
                 "export: " + r.op + " was traced in training mode (the exporter runs eval)");
  const Tensor& x = r.inputs.at(0);
  const int64_t c = x.size(1);
  std::string scale = onnx_optional_input(b, r, 1), shift = onnx_optional_input(b, r, 2);
  if (scale.empty()) scale = b.const_f32("ones", std::vector<float>(c, 1.0f));
  if (shift.empty()) shift = b.const_f32("zeros", std::vector<float>(c, 0.0f));
  HPCNET_REQUIRE(r.inputs.at(3).defined() && r.inputs.at(4).defined(),
                 "export: " + r.op + " without running statistics cannot run in eval mode");
  std::string y = b.fresh(r.op);
  OnnxNode& n =
      b.node("BatchNormalization",
             {onnx_input(b, r, 0), scale, shift, onnx_input(b, r, 3), onnx_input(b, r, 4)}, {y});
  attr_float(n, "epsilon", static_cast<float>(r.attrs.at("eps")));
  if (std::string residual = onnx_optional_input(b, r, 5); !residual.empty())
    y = onnx_node(b, "Add", op_name::add, {y, residual});
  return onnx_int_attr(r, op_name::relu) ? onnx_node(b, "Relu", op_name::relu, {y}) : y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord batch_norm{op_name::batch_norm, {.emit = ops::emit_batch_norm}};

}  // namespace hpcnet::op_record
