// The records of global_avg_pool2d, subsample_pad, dropout, upsample_nearest2d and
// upsample_bilinear2d (src/ops/op_record.h): names and ONNX mappings.
#include <limits>
#include <string>
#include <vector>

#include "src/ops/onnx_graph.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {
namespace {

// (N, C, H, W) -> (N, C, 1, 1) -> (N, C).
std::string emit_global_avg_pool2d(OnnxGraph& b, const trace::Record& r) {
  const std::string pooled = onnx_node(b, "GlobalAveragePool", r.op, {onnx_input(b, r, 0)});
  const std::string y = b.fresh("flatten");
  attr_int(b.node("Flatten", {pooled}, {y}), "axis", 1);
  return y;
}
// F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, pad, pad)).
std::string emit_subsample_pad(OnnxGraph& b, const trace::Record& r) {
  const int64_t s = onnx_int_attr(r, "stride"), pad = onnx_int_attr(r, "pad");
  const int64_t big = std::numeric_limits<int64_t>::max();
  const std::string sub = b.fresh("subsample");
  b.node("Slice",
         {onnx_input(b, r, 0), b.const_i64("starts", {0, 0}), b.const_i64("ends", {big, big}),
          b.const_i64("axes", {2, 3}), b.const_i64("steps", {s, s})},
         {sub});
  const std::string y = b.fresh("pad");
  b.node("Pad", {sub, b.const_i64("pads", {0, pad, 0, 0, 0, pad, 0, 0})}, {y});
  return y;
}
// Traced only in training mode; eval is the identity.
std::string emit_dropout(OnnxGraph& b, const trace::Record& r) { return onnx_input(b, r, 0); }
// torch's "nearest": src = floor(dst / scale), ONNX's asymmetric transform with floor.
std::string emit_upsample_nearest2d(OnnxGraph& b, const trace::Record& r) {
  const float s = static_cast<float>(onnx_int_attr(r, "scale"));
  const std::string y = b.fresh(r.op);
  OnnxNode& n =
      b.node("Resize", {onnx_input(b, r, 0), "", b.const_f32("scales", {1.0f, 1.0f, s, s})}, {y});
  attr_string(n, "mode", "nearest");
  attr_string(n, "coordinate_transformation_mode", "asymmetric");
  attr_string(n, "nearest_mode", "floor");
  return y;
}
// sizes = concat(shape(x)[0:2], (out_h, out_w)): fixed spatial size, any batch.
std::string emit_upsample_bilinear2d(OnnxGraph& b, const trace::Record& r) {
  const std::string x = onnx_input(b, r, 0);
  const std::string nc = b.fresh("shape");
  OnnxNode& sh = b.node("Shape", {x}, {nc});
  attr_int(sh, "start", 0);
  attr_int(sh, "end", 2);
  const std::string sizes = b.fresh("sizes");
  attr_int(b.node("Concat", {nc, b.const_i64("hw", {r.output.size(2), r.output.size(3)})}, {sizes}),
           "axis", 0);
  const std::string y = b.fresh(r.op);
  OnnxNode& n = b.node("Resize", {x, "", "", sizes}, {y});
  attr_string(n, "mode", "linear");  // not an op name: ONNX Resize's mode
  // torch's align_corners=False is half-pixel, src = (dst + 0.5) / scale - 0.5, with sources
  // outside the input taking its edge (as linear Resize does): pytorch_half_pixel, as torch.onnx
  // writes it, except that pytorch_half_pixel maps an output of length 1 to source 0 where torch
  // takes the centre, (H - 1) / 2; half_pixel there (the two agree on every other length).
  const bool length_one = r.output.size(2) == 1 || r.output.size(3) == 1;
  const char* half_pixel = length_one ? "half_pixel" : "pytorch_half_pixel";
  attr_string(n, "coordinate_transformation_mode",
              onnx_int_attr(r, "align_corners") ? "align_corners" : half_pixel);
  return y;
}

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord global_avg_pool2d{op_name::global_avg_pool2d,
                                      {.emit = ops::emit_global_avg_pool2d}};
const ops::OpRecord subsample_pad{op_name::subsample_pad, {.emit = ops::emit_subsample_pad}};
const ops::OpRecord dropout{op_name::dropout, {.emit = ops::emit_dropout}};
const ops::OpRecord upsample_nearest2d{op_name::upsample_nearest2d,
                                       {.emit = ops::emit_upsample_nearest2d}};
const ops::OpRecord upsample_bilinear2d{op_name::upsample_bilinear2d,
                                        {.emit = ops::emit_upsample_bilinear2d}};

}  // namespace hpcnet::op_record
