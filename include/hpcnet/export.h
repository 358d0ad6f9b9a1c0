// Model export: ONNX (opset 17) through the ONNX project's own protobuf classes (libonnx). The
// model is run once in eval mode under an op trace (src/ops/trace.h); each traced op becomes one
// or a few ONNX nodes, parameters and buffers become initializers under their state_dict names
// (conv1.weight, bn1.running_mean, ...), so the file reads like torch.onnx.export's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  // What the input holds: RGB pixels / 255, then (x - mean) / std per channel (eval's Normalize;
  // detect has none: mean 0, std 1, Ultralytics' x / 255). Written to the metadata ("normalize",
  // "mean", "std") and used to draw the traced input (uniform pixels, normalised).
  std::array<float, 3> mean{0.f, 0.f, 0.f}, std{1.f, 1.f, 1.f};
  // The exported output for the traced input (N, C, H, W): model.forward when empty; a task's
  // Task::export_output (detect: the decoded (N, 4 + nc, A) predictions).
  std::function<Tensor(nn::Module&, const Tensor&)> output;
  // More metadata_props (key, value), written after the ones above (Task::export_metadata).
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct OnnxResult {
  int64_t nodes = 0, initializers = 0, parameters = 0;  // parameters: elements in initializers
  Tensor sample_input;   // the traced input (N, C, H, W), values from a fixed seed
  Tensor sample_output;  // hpcnet's output for it: what an ONNX runtime must reproduce
};

// Requires: model built for the input (channels, height, width); its outputs come from ops that
// export (conv2d, conv_transpose2d, max_pool2d, linear, relu, silu, sigmoid, add, mul,
// mul_scalar, reshape, narrow, batch_norm, global_avg_pool2d, subsample_pad, dropout,
// upsample_nearest2d, upsample_bilinear2d, cat, log_softmax) and traced functions
// (yolo_decode). Ensures: the model is in eval mode on return; `path` holds a ModelProto (IR 8,
// opset 17) with one input "input" (N, C, H, W) float32 and one output "output" (options.output's
// tensor, else model.forward's), written atomically. Throws InputError for a
// traced op that has no ONNX form and for a tensor that no traced op, parameter or buffer
// produced (which would mean the model computes outside the op table).
OnnxResult export_onnx(nn::Module& model, const OnnxOptions& options, const std::string& path);

// The input normalisation in words (the "normalize" metadata): "x / 255, x: RGB pixels 0..255
// (N, 3, H, W)" (Ultralytics' form: mean 0, std 1) or "(x / 255 - mean) / std, x: ...".
std::string normalize_text(const OnnxOptions& options);

}  // namespace hpcnet::exporting
