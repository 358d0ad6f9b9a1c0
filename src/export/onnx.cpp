// ONNX export: traces model.forward once in eval mode and maps each trace::Record to ONNX nodes of
// opset 17 through the op's record (its onnx.emit, in src/ops/<family>/record.cpp, writes through
// ops::OnnxGraph, implemented here over the protobuf classes). Traced functions outside the op
// table (the YOLO decoding: Softmax + ReduceSum for the DFL, Slice, Sub, Add, Mul, Concat) become
// their own few nodes here, their constants (anchors, strides) initializers. Values are named
// after the op that made them ("conv2d_3"); parameters and buffers keep their state_dict names.
// Dim 0 is never baked into a shape constant, so --batch dynamic graphs run at any batch size.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <set>
#include <unordered_map>

#include "hpcnet/autograd.h"
#include "hpcnet/error.h"
#include "hpcnet/export.h"
#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "src/ops/onnx_graph.h"
#include "src/ops/trace.h"

namespace hpcnet::exporting {

namespace {

constexpr int kOpset = 17;
constexpr int64_t kIrVersion = 8;  // the IR version of opset 17 (ONNX 1.12)
// The traced function outside the op table that the exporter knows (task::detect's decoding).
constexpr char kYoloDecode[] = "yolo_decode";

// An ONNX node's attributes, set through the ops layer's OnnxNode.
class ProtoNode : public ops::OnnxNode {
 public:
  explicit ProtoNode(onnx::NodeProto& n) : n_(n) {}
  void set_int(const char* name, int64_t v) override {
    onnx::AttributeProto& a = add(name, onnx::AttributeProto::INT);
    a.set_i(v);
  }
  void set_ints(const char* name, const std::vector<int64_t>& v) override {
    onnx::AttributeProto& a = add(name, onnx::AttributeProto::INTS);
    for (int64_t x : v) a.add_ints(x);
  }
  void set_float(const char* name, float v) override {
    onnx::AttributeProto& a = add(name, onnx::AttributeProto::FLOAT);
    a.set_f(v);
  }
  void set_string(const char* name, const std::string& v) override {
    onnx::AttributeProto& a = add(name, onnx::AttributeProto::STRING);
    a.set_s(v);
  }

 private:
  onnx::AttributeProto& add(const char* name, onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto& a = *n_.add_attribute();
    a.set_name(name);
    a.set_type(type);
    return a;
  }
  onnx::NodeProto& n_;
};

// The graph the op records' ONNX mappings write into (ops::OnnxGraph over the protobuf classes).
class GraphBuilder : public ops::OnnxGraph {
 public:
  GraphBuilder(onnx::GraphProto& g, const nn::Module& model) : g_(g) {
    for (const auto& [name, t] : model.named_parameters()) params_[t.impl()] = {name, t};
    for (const auto& [name, t] : model.named_buffers()) params_[t.impl()] = {name, t};
  }

  void set_name(const Tensor& t, const std::string& name) { names_[t.impl()] = name; }

  // The value name of a traced tensor, a parameter or buffer (added as an initializer on first
  // use), or an InputError naming the op that received a tensor of unknown origin.
  std::string value(const Tensor& t, const std::string& op) override {
    if (auto it = names_.find(t.impl()); it != names_.end()) return it->second;
    if (auto it = params_.find(t.impl()); it != params_.end()) {
      const std::string& name = it->second.first;
      add_initializer(name, it->second.second);
      names_[t.impl()] = name;
      return name;
    }
    throw InputError("export: " + op + " reads a tensor " + shape_str(t.shape()) +
                     " that no exported op, parameter or buffer produced; this model computes "
                     "outside the op table and cannot be exported yet");
  }

  std::string fresh(const std::string& base) override {
    return base + "_" + std::to_string(counter_++);
  }

  ops::OnnxNode& node(const std::string& op_type, const std::vector<std::string>& inputs,
                      const std::vector<std::string>& outputs) override {
    onnx::NodeProto& n = *g_.add_node();
    n.set_op_type(op_type);
    n.set_name(op_type + "_" + std::to_string(g_.node_size() - 1));
    for (const std::string& i : inputs) n.add_input(i);
    for (const std::string& o : outputs) n.add_output(o);
    return nodes_.emplace_back(n);
  }

  // A float32 initializer holding t's values (any float dtype, any layout, on the host).
  void add_initializer(const std::string& name, const Tensor& t_in) {
    if (!initialized_.insert(name).second) return;
    Tensor t = t_in.to(cpu_device()).contiguous();
    if (t.dtype() != DType::kFloat32) t = t.to(DType::kFloat32);
    onnx::TensorProto& p = *g_.add_initializer();
    p.set_name(name);
    p.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.shape()) p.add_dims(d);
    p.set_raw_data(t.data<float>(), static_cast<size_t>(t.numel()) * sizeof(float));
    parameters_ += t.numel();
  }

  using ops::OnnxGraph::const_f32;
  std::string const_f32(const std::string& base, const std::vector<float>& v,
                        const std::vector<int64_t>& dims) override {
    const std::string name = fresh(base);
    onnx::TensorProto& p = *g_.add_initializer();
    p.set_name(name);
    p.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) p.add_dims(d);
    for (float x : v) p.add_float_data(x);
    initialized_.insert(name);
    return name;
  }

  // A constant that a traced function computed (not a parameter: not counted in parameters()),
  // as an initializer named `name` with t's shape and values.
  std::string constant(const std::string& name, const Tensor& t) override {
    HPCNET_CHECK(!initialized_.count(name), "export: two constants named " + name);
    const int64_t counted = parameters_;
    add_initializer(name, t);
    parameters_ = counted;
    return name;
  }

  std::string const_i64(const std::string& base, const std::vector<int64_t>& v) override {
    const std::string name = fresh(base);
    onnx::TensorProto& p = *g_.add_initializer();
    p.set_name(name);
    p.set_data_type(onnx::TensorProto::INT64);
    p.add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) p.add_int64_data(x);
    initialized_.insert(name);
    return name;
  }

  int64_t parameters() const { return parameters_; }

 private:
  onnx::GraphProto& g_;
  std::deque<ProtoNode> nodes_;  // the attribute setters handed out by node()
  std::unordered_map<const TensorImpl*, std::pair<std::string, Tensor>> params_;
  std::unordered_map<const TensorImpl*, std::string> names_;
  std::set<std::string> initialized_;
  int64_t counter_ = 0, parameters_ = 0;
};

// The YOLOv8 Detect head's inference decoding (Ultralytics' Detect._inference; the record of
// task::detect::decode_predictions): inputs boxes (B, 4 R, A) raw DFL logits, scores (B, nc, A)
// logits, anchors (1, 2, A) centres in grid cells, strides (1, 1, A); attr reg_max R. Output
// (B, 4 + nc, A): the centre x, y and width, height in input pixels, then the sigmoid scores.
//   d = sum_j j softmax_j(boxes viewed (B, 4, R, A))    (the DFL, (B, 4, A): l, t, r, b)
//   x1y1 = anchors - d[:, :2], x2y2 = anchors + d[:, 2:]
//   cat((x1y1 + x2y2) / 2, x2y2 - x1y1) * strides, then cat with sigmoid(scores)
std::string emit_yolo_decode(ops::OnnxGraph& b, const trace::Record& r) {
  const int64_t R = ops::onnx_int_attr(r, "reg_max"), A = r.inputs.at(0).size(2);
  const std::string boxes = b.value(r.inputs.at(0), r.op), scores = b.value(r.inputs.at(1), r.op);
  const std::string anchors = b.constant("anchors", r.inputs.at(2));
  const std::string strides = b.constant("strides", r.inputs.at(3));
  auto node = [&](const char* type, const std::string& base, std::vector<std::string> in) {
    const std::string y = b.fresh(base);
    b.node(type, in, {y});
    return y;
  };
  const std::string bins4 =
      node("Reshape", "dfl_view", {boxes, b.const_i64("shape", {0, 4, R, A})});
  const std::string prob = b.fresh("dfl_softmax");
  attr_int(b.node("Softmax", {bins4}, {prob}), "axis", 2);
  std::vector<float> bins(static_cast<size_t>(R));
  for (int64_t j = 0; j < R; ++j) bins[static_cast<size_t>(j)] = static_cast<float>(j);
  const std::string weighted =
      node("Mul", "dfl_weighted", {prob, b.const_f32("dfl_bins", bins, {R, 1})});  // (R, 1)
  const std::string dist = b.fresh("dfl");
  attr_int(b.node("ReduceSum", {weighted, b.const_i64("axes", {2})}, {dist}), "keepdims", 0);
  auto slice = [&](int64_t start) {
    return node("Slice", "dist",
                {dist, b.const_i64("starts", {start}), b.const_i64("ends", {start + 2}),
                 b.const_i64("axes", {1})});
  };
  const std::string lt = slice(0), rb = slice(2);
  const std::string x1y1 = node("Sub", "x1y1", {anchors, lt});
  const std::string x2y2 = node("Add", "x2y2", {anchors, rb});
  const std::string centre =
      node("Mul", "cxy", {node("Add", "sum_xy", {x1y1, x2y2}), b.const_f32("half", {0.5f}, true)});
  const std::string wh = node("Sub", "wh", {x2y2, x1y1});
  const std::string xywh = b.fresh("xywh");
  attr_int(b.node("Concat", {centre, wh}, {xywh}), "axis", 1);
  const std::string pixels = node("Mul", "xywh_pixels", {xywh, strides});
  const std::string cls = node("Sigmoid", "scores", {scores});
  const std::string y = b.fresh("yolo_decode");
  attr_int(b.node("Concat", {pixels, cls}, {y}), "axis", 1);
  return y;
}

// One record's nodes, by the op's record (its ONNX mapping), or for a traced function outside
// the op table by its name; returns the name of the value holding r.output.
std::string emit(ops::OnnxGraph& b, const trace::Record& r) {
  if (r.record) {
    HPCNET_REQUIRE(r.record->onnx.emit,
                   "export: op '" + r.op + "' is not exportable: " + r.record->onnx.not_exportable);
    return r.record->onnx.emit(b, r);
  }
  if (r.op == kYoloDecode) return emit_yolo_decode(b, r);
  throw InputError("export: op '" + r.op + "' has no ONNX form yet");
}

void set_shape(onnx::ValueInfoProto& v, const std::string& name, const Shape& shape,
               bool dynamic_batch) {
  v.set_name(name);
  onnx::TypeProto_Tensor& t = *v.mutable_type()->mutable_tensor_type();
  t.set_elem_type(onnx::TensorProto::FLOAT);
  for (size_t i = 0; i < shape.size(); ++i) {
    onnx::TensorShapeProto_Dimension& d = *t.mutable_shape()->add_dim();
    if (i == 0 && dynamic_batch)
      d.set_dim_param("batch");
    else
      d.set_dim_value(shape[i]);
  }
}

void add_metadata(onnx::ModelProto& m, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto& e = *m.add_metadata_props();
  e.set_key(key);
  e.set_value(value);
}

std::string float_list(const std::array<float, 3>& v) {
  char b[96];
  std::snprintf(b, sizeof b, "[%g, %g, %g]", v[0], v[1], v[2]);
  return b;
}

}  // namespace

std::string normalize_text(const OnnxOptions& o) {
  const bool plain =
      o.mean == std::array<float, 3>{0.f, 0.f, 0.f} && o.std == std::array<float, 3>{1.f, 1.f, 1.f};
  return std::string(plain ? "x / 255" : "(x / 255 - mean) / std") +
         ", x: RGB pixels 0..255 (N, 3, H, W)";
}

OnnxResult export_onnx(nn::Module& model, const OnnxOptions& o, const std::string& path) {
  HPCNET_REQUIRE(o.batch >= 1, "export: --batch must be at least 1");
  HPCNET_REQUIRE(o.height >= 1 && o.width >= 1 && o.channels >= 1,
                 "export: the input size must be positive");
  model.eval();
  OnnxResult res;
  // A fixed input: uniform pixels in [0, 1) from a seeded generator, normalised as the model's
  // input is (o.mean, o.std per channel).
  res.sample_input = Tensor::empty({o.batch, o.channels, o.height, o.width});
  Rng rng(20261203);
  float* px = res.sample_input.data<float>();
  const int64_t plane = o.height * o.width;
  for (int64_t i = 0; i < res.sample_input.numel(); ++i) {
    const size_t c = static_cast<size_t>(std::min<int64_t>((i / plane) % o.channels, 2));
    px[i] = (static_cast<float>(rng.uniform()) - o.mean[c]) / o.std[c];
  }
  Device dev = cpu_device();
  if (const auto params = model.parameters(); !params.empty()) dev = params.front().device();

  trace::Recorder rec;
  Tensor x = res.sample_input.to(dev), y;
  {
    NoGradGuard no_grad;
    trace::Scope scope(rec);
    y = o.output ? o.output(model, x) : model.forward(x);
  }
  res.sample_output = y.to(cpu_device()).contiguous();

  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("hpcnet");
  m.set_producer_version(HPCNET_VERSION_STRING);
  m.set_model_version(1);
  onnx::OperatorSetIdProto& opset = *m.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOpset);
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name(o.model_name.empty() ? "hpcnet" : o.model_name);

  GraphBuilder b(g, model);
  b.set_name(x, "input");
  std::string out_name;
  for (const trace::Record& r : rec.records) {
    out_name = emit(b, r);
    b.set_name(r.output, out_name);
  }
  HPCNET_REQUIRE(!rec.records.empty(), "export: the model ran no exportable op");
  out_name = b.value(y, "the model's output");
  // The output is called "output": rename the value where it is made and wherever it is read.
  for (onnx::NodeProto& n : *g.mutable_node()) {
    for (std::string& s : *n.mutable_output())
      if (s == out_name) s = "output";
    for (std::string& s : *n.mutable_input())
      if (s == out_name) s = "output";
  }
  set_shape(*g.add_input(), "input", x.shape(), o.dynamic_batch);
  set_shape(*g.add_output(), "output", y.shape(), o.dynamic_batch);

  if (!o.model_name.empty()) add_metadata(m, "model", o.model_name);
  add_metadata(m, "task", o.task);
  add_metadata(m, "imgsz", "[" + std::to_string(o.height) + ", " + std::to_string(o.width) + "]");
  if (!o.classes.empty()) {  // Ultralytics' form: {0: 'airplane', 1: 'automobile', ...}
    std::string names = "{";
    for (size_t i = 0; i < o.classes.size(); ++i)
      names += (i ? ", " : "") + std::to_string(i) + ": '" + o.classes[i] + "'";
    add_metadata(m, "names", names + "}");
  }
  add_metadata(m, "batch", o.dynamic_batch ? "dynamic" : std::to_string(o.batch));
  add_metadata(m, "normalize", normalize_text(o));
  add_metadata(m, "mean", float_list(o.mean));  // not an op name: the input normalisation
  add_metadata(m, "std", float_list(o.std));
  for (const auto& [key, value] : o.metadata) add_metadata(m, key, value);

  std::string bytes;
  HPCNET_CHECK(m.SerializeToString(&bytes),
               "export: the ONNX model could not be serialised (over protobuf's 2 GB limit?)");
  write_file_atomic(path, bytes);
  res.nodes = g.node_size();
  res.initializers = g.initializer_size();
  res.parameters = b.parameters();
  return res;
}

}  // namespace hpcnet::exporting
