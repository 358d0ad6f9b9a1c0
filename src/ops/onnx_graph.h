// What an op's ONNX mapping (its record's onnx.emit, src/ops/<family>/record.cpp) may do to the
// graph being exported: name the values it reads, add nodes with attributes and constants. The
// exporter (src/export/onnx.cpp) implements it over the ONNX protobuf classes, so the ops layer
// needs no ONNX header. Opset 17.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/tensor.h"
#include "src/ops/trace.h"

namespace hpcnet::ops {

// A node just added: its attributes.
class OnnxNode {
 public:
  virtual ~OnnxNode() = default;
  virtual void set_int(const char* name, int64_t v) = 0;
  virtual void set_ints(const char* name, const std::vector<int64_t>& v) = 0;
  virtual void set_float(const char* name, float v) = 0;
  virtual void set_string(const char* name, const std::string& v) = 0;
};

inline void attr_int(OnnxNode& n, const char* name, int64_t v) { n.set_int(name, v); }
inline void attr_ints(OnnxNode& n, const char* name, const std::vector<int64_t>& v) {
  n.set_ints(name, v);
}
inline void attr_float(OnnxNode& n, const char* name, float v) { n.set_float(name, v); }
inline void attr_string(OnnxNode& n, const char* name, const std::string& v) {
  n.set_string(name, v);
}

class OnnxGraph {
 public:
  virtual ~OnnxGraph() = default;
  // The value name of a traced tensor, a parameter or buffer (added as an initializer on first
  // use), or an InputError naming the op that received a tensor of unknown origin.
  virtual std::string value(const Tensor& t, const std::string& op) = 0;
  // A new value name: base_<counter>.
  virtual std::string fresh(const std::string& base) = 0;
  // Adds a node of op_type reading inputs ("" for an absent optional input), writing outputs.
  virtual OnnxNode& node(const std::string& op_type, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs) = 0;
  // A float32 constant of the given dims ({}: a scalar; their product is v.size()).
  virtual std::string const_f32(const std::string& base, const std::vector<float>& v,
                                const std::vector<int64_t>& dims) = 0;
  // An int64 constant of shape (v.size(),).
  virtual std::string const_i64(const std::string& base, const std::vector<int64_t>& v) = 0;
  // A constant that a traced function computed (not a parameter), named `name`.
  virtual std::string constant(const std::string& name, const Tensor& t) = 0;

  // A float32 vector constant (v.size(),), or a scalar.
  std::string const_f32(const std::string& base, const std::vector<float>& v, bool scalar = false) {
    return const_f32(
        base, v,
        scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(v.size())});
  }
};

// Reading a trace record in a mapping: input i's value name, an optional input ("" when absent),
// an integer attribute (an error naming the op when it was not traced).
inline std::string onnx_input(OnnxGraph& g, const trace::Record& r, size_t i) {
  return g.value(r.inputs.at(i), r.op);
}
inline std::string onnx_optional_input(OnnxGraph& g, const trace::Record& r, size_t i) {
  return i < r.inputs.size() && r.inputs[i].defined() ? onnx_input(g, r, i) : std::string();
}
inline int64_t onnx_int_attr(const trace::Record& r, const char* key) {
  auto it = r.attrs.find(key);
  HPCNET_CHECK(it != r.attrs.end(), "export: " + r.op + " was traced without '" + key + "'");
  return static_cast<int64_t>(it->second);
}
// One node of op_type over inputs, its output a fresh value named after base.
inline std::string onnx_node(OnnxGraph& g, const char* op_type, const std::string& base,
                             const std::vector<std::string>& inputs) {
  const std::string y = g.fresh(base);
  g.node(op_type, inputs, {y});
  return y;
}

// y, or Relu(y) when the op was traced with its activation fused (attribute relu = 1).
inline std::string onnx_fused_relu(OnnxGraph& g, const trace::Record& r, const std::string& y) {
  const auto relu = r.attrs.find(op_name::relu);
  if (relu == r.attrs.end() || relu->second == 0) return y;
  return onnx_node(g, "Relu", op_name::relu, {y});
}

}  // namespace hpcnet::ops
