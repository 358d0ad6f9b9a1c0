// Op tracing for export: while a trace::Scope is alive on a thread, each model-level op of F::
// (conv2d, linear, batch_norm_act, resample, cat, ...) appends one Record naming the op, its input
// and output tensors and its parameters. The exporter (src/export/onnx.cpp) turns the records into
// a graph. A Record holds its tensors, so none is freed (and its address reused) while tracing.
// A few plain functions outside the op table record themselves too (add_function), so they export:
// "yolo_decode" (task::detect::decode_predictions), whose constant inputs (anchors, strides)
// no op produced.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hpcnet/tensor.h"
#include "src/ops/op_record.h"

// Layer: ops (included by the op families in src/ops/*.cpp, read by src/export).

namespace hpcnet::trace {

struct Record {
  std::string op;                         // the op's name (op_name::NAME), or the function's
  const ops::OpRecord* record = nullptr;  // the op's record; null for a function outside the table
  std::vector<Tensor> inputs;  // as passed to F::op (undefined for an absent optional input)
  Tensor output;
  std::map<std::string, double> attrs;  // stride, padding, relu, eps, align_corners, ...
};

struct Recorder {
  std::vector<Record> records;
};

inline thread_local Recorder* g_recorder = nullptr;

// Records into r on this thread for the scope's lifetime (scopes nest; the inner one wins).
class Scope {
 public:
  explicit Scope(Recorder& r) : prev_(g_recorder) { g_recorder = &r; }
  ~Scope() { g_recorder = prev_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Recorder* prev_;
};

// Appends a record of op when a Scope is alive on this thread; otherwise costs one load.
inline void add(const ops::OpRecord& op, std::vector<Tensor> inputs, const Tensor& output,
                std::map<std::string, double> attrs = {}) {
  if (g_recorder == nullptr) return;
  g_recorder->records.push_back({op.name, &op, std::move(inputs), output, std::move(attrs)});
}
// The same for a traced function outside the op table (the exporter knows it by its name).
inline void add_function(const char* name, std::vector<Tensor> inputs, const Tensor& output,
                         std::map<std::string, double> attrs = {}) {
  if (g_recorder == nullptr) return;
  g_recorder->records.push_back({name, nullptr, std::move(inputs), output, std::move(attrs)});
}

}  // namespace hpcnet::trace
