// Model export: ONNX (opset 17) through the ONNX project's own protobuf classes (libonnx). The
// model is run once in eval mode under an op trace (src/ops/trace.h); each traced op becomes one
// or a few ONNX nodes, parameters and buffers become initializers under their state_dict names
// (conv1.weight, bn1.running_mean, ...), so the file reads like torch.onnx.export's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpcnet/nn.h"

namespace hpcnet::exporting {

struct OnnxOptions {
  int64_t batch = 1;           // the traced batch size (the input's dim 0 when not dynamic)
  bool dynamic_batch = false;  // dim 0 of the input and output named "batch" instead of fixed
  int64_t height = 32, width = 32;
  int64_t channels = 3;
  // Written to metadata_props (as Ultralytics does: names, task, imgsz) and the graph's name.
  std::string model_name;
  std::string task = "classify";
  std::vector<std::string> classes;
};

struct OnnxResult {
  int64_t nodes = 0, initializers = 0, parameters = 0;  // parameters: elements in initializers
  Tensor sample_input;   // the traced input (N, C, H, W), values from a fixed seed
  Tensor sample_output;  // hpcnet's output for it: what an ONNX runtime must reproduce
};

// Requires: model built for the input (channels, height, width); its outputs come from ops that
// export (conv2d, conv_transpose2d, max_pool2d, linear, relu, add, mul_scalar, reshape,
// batch_norm, global_avg_pool2d, subsample_pad, dropout, upsample_nearest2d,
// upsample_bilinear2d, cat, log_softmax). Ensures: the model is in eval mode on return; `path`
// holds a ModelProto (IR 8, opset 17) with one input "input" (N, C, H, W) float32 and one
// output "output" (model.forward's tensor), written atomically. Throws InputError for a
// traced op that has no ONNX form and for a tensor that no traced op, parameter or buffer
// produced (which would mean the model computes outside the op table).
OnnxResult export_onnx(nn::Module& model, const OnnxOptions& options, const std::string& path);

}  // namespace hpcnet::exporting
