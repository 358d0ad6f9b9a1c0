// A small reference interpreter of ONNX graphs for the export tests: runs a ModelProto on the
// host in plain float32 loops, straight from the operator specification (opset 17), for
// the node types hpcnet's exporter writes for YOLOv8 (Conv, BatchNormalization, Sigmoid, Relu,
// Add, Sub, Mul, Div with numpy broadcasting, Erf, Tanh (GELU), MaxPool, Resize nearest, Concat,
// Slice, Reshape, Softmax, ReduceSum; grouped Conv, 3-D MatMul and Transpose for YOLO11's attention
// and DWConv). Written for correctness, not speed; an unknown node type is a test failure.
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace hpcnet::test_util::onnx_eval {

struct Value {
  std::vector<int64_t> dims;
  std::vector<float> f;    // float tensors
  std::vector<int64_t> i;  // int64 tensors (shapes, axes)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

inline Value from_proto(const onnx::TensorProto& p) {
  Value v;
  v.dims.assign(p.dims().begin(), p.dims().end());
  const int64_t n = v.numel();
  if (p.data_type() == onnx::TensorProto::INT64) {
    v.i.assign(p.int64_data().begin(), p.int64_data().end());
    if (v.i.empty() && !p.raw_data().empty()) {
      v.i.resize(static_cast<size_t>(n));
      std::memcpy(v.i.data(), p.raw_data().data(), v.i.size() * sizeof(int64_t));
    }
  } else {
    v.f.assign(p.float_data().begin(), p.float_data().end());
    if (v.f.empty() && !p.raw_data().empty()) {
      v.f.resize(static_cast<size_t>(n));
      std::memcpy(v.f.data(), p.raw_data().data(), v.f.size() * sizeof(float));
    }
  }
  return v;
}

inline const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
inline int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  const auto* a = attr(n, name);
  return a ? a->i() : def;
}
inline std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name,
                                      std::vector<int64_t> def) {
  const auto* a = attr(n, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : def;
}

inline std::vector<int64_t> strides_of(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int64_t k = static_cast<int64_t>(d.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * d[k + 1];
  return s;
}

// Numpy broadcasting of a binary float op.
template <class Fn>
Value broadcast(const Value& a, const Value& b, Fn fn) {
  const size_t r = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> da(r, 1), db(r, 1), out(r);
  std::copy(a.dims.begin(), a.dims.end(), da.begin() + (r - a.dims.size()));
  std::copy(b.dims.begin(), b.dims.end(), db.begin() + (r - b.dims.size()));
  for (size_t k = 0; k < r; ++k) {
    if (da[k] != db[k] && da[k] != 1 && db[k] != 1) throw std::runtime_error("broadcast mismatch");
    out[k] = std::max(da[k], db[k]);
  }
  Value y;
  y.dims = out;
  y.f.resize(static_cast<size_t>(y.numel()));
  const auto so = strides_of(out), sa = strides_of(da), sb = strides_of(db);
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t ia = 0, ib = 0;
    for (size_t k = 0; k < r; ++k) {
      const int64_t c = (e / so[k]) % out[k];
      ia += (da[k] == 1 ? 0 : c) * sa[k];
      ib += (db[k] == 1 ? 0 : c) * sb[k];
    }
    y.f[static_cast<size_t>(e)] = fn(a.f[static_cast<size_t>(ia)], b.f[static_cast<size_t>(ib)]);
  }
  return y;
}

inline Value conv(const onnx::NodeProto& n, const Value& x, const Value& w, const Value* b) {
  const int64_t G = attr_i(n, "group", 1);  // output k reads input channels of its group
  const auto st = attr_ints(n, "strides", {1, 1}), pd = attr_ints(n, "pads", {0, 0, 0, 0}),
             dl = attr_ints(n, "dilations", {1, 1});
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t K = w.dims[0], R = w.dims[2], S = w.dims[3], CG = w.dims[1];
  if (CG * G != C || K % G != 0) throw std::runtime_error("Conv: weight does not fit the groups");
  const int64_t P = (H + pd[0] + pd[2] - dl[0] * (R - 1) - 1) / st[0] + 1;
  const int64_t Q = (W + pd[1] + pd[3] - dl[1] * (S - 1) - 1) / st[1] + 1;
  Value y;
  y.dims = {N, K, P, Q};
  y.f.assign(static_cast<size_t>(y.numel()), 0.f);
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          float acc = b ? b->f[static_cast<size_t>(k)] : 0.f;
          for (int64_t cg = 0; cg < CG; ++cg)
            for (int64_t r = 0; r < R; ++r) {
              const int64_t c = k / (K / G) * CG + cg;
              const int64_t h = p * st[0] - pd[0] + r * dl[0];
              if (h < 0 || h >= H) continue;
              for (int64_t s = 0; s < S; ++s) {
                const int64_t ww = q * st[1] - pd[1] + s * dl[1];
                if (ww < 0 || ww >= W) continue;
                acc += x.f[static_cast<size_t>(((nn * C + c) * H + h) * W + ww)] *
                       w.f[static_cast<size_t>(((k * CG + cg) * R + r) * S + s)];
              }
            }
          y.f[static_cast<size_t>(((nn * K + k) * P + p) * Q + q)] = acc;
        }
  return y;
}

inline Value max_pool(const onnx::NodeProto& n, const Value& x) {
  const auto ks = attr_ints(n, "kernel_shape", {}), st = attr_ints(n, "strides", {1, 1}),
             pd = attr_ints(n, "pads", {0, 0, 0, 0});
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t P = (H + pd[0] + pd[2] - ks[0]) / st[0] + 1,
                Q = (W + pd[1] + pd[3] - ks[1]) / st[1] + 1;
  Value y;
  y.dims = {N, C, P, Q};
  y.f.resize(static_cast<size_t>(y.numel()));
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t r = 0; r < ks[0]; ++r)
          for (int64_t s = 0; s < ks[1]; ++s) {
            const int64_t h = p * st[0] - pd[0] + r, w = q * st[1] - pd[1] + s;
            if (h >= 0 && h < H && w >= 0 && w < W)
              m = std::max(m, x.f[static_cast<size_t>((nc * H + h) * W + w)]);
          }
        y.f[static_cast<size_t>((nc * P + p) * Q + q)] = m;
      }
  return y;
}

// Resize, mode nearest, coordinate_transformation_mode asymmetric, nearest_mode floor, scales.
inline Value resize_nearest(const onnx::NodeProto& n, const Value& x, const Value& scales) {
  const auto* mode = attr(n, "mode");
  const auto* ctm = attr(n, "coordinate_transformation_mode");
  if (!mode || mode->s() != "nearest" || !ctm || ctm->s() != "asymmetric")
    throw std::runtime_error("Resize: only nearest / asymmetric");
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t P = static_cast<int64_t>(std::floor(H * scales.f[2])),
                Q = static_cast<int64_t>(std::floor(W * scales.f[3]));
  Value y;
  y.dims = {N, C, P, Q};
  y.f.resize(static_cast<size_t>(y.numel()));
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t h = std::min(H - 1, static_cast<int64_t>(std::floor(p / scales.f[2])));
        const int64_t w = std::min(W - 1, static_cast<int64_t>(std::floor(q / scales.f[3])));
        y.f[static_cast<size_t>((nc * P + p) * Q + q)] =
            x.f[static_cast<size_t>((nc * H + h) * W + w)];
      }
  return y;
}

// The products of the dims before and after `axis`.
inline void split_axis(const std::vector<int64_t>& d, int64_t axis, int64_t& outer,
                       int64_t& inner) {
  outer = inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= d[k];
  for (size_t k = static_cast<size_t>(axis) + 1; k < d.size(); ++k) inner *= d[k];
}

inline int64_t norm_axis(int64_t a, size_t rank) {
  return a < 0 ? a + static_cast<int64_t>(rank) : a;
}

inline Value concat(const onnx::NodeProto& n, const std::vector<const Value*>& xs) {
  const int64_t axis = norm_axis(attr_i(n, "axis", 0), xs[0]->dims.size());
  Value y;
  y.dims = xs[0]->dims;
  y.dims[axis] = 0;
  for (const Value* x : xs) y.dims[axis] += x->dims[axis];
  int64_t outer, inner;
  split_axis(y.dims, axis, outer, inner);
  for (int64_t o = 0; o < outer; ++o)
    for (const Value* x : xs) {
      const int64_t len = x->dims[axis] * inner;
      y.f.insert(y.f.end(), x->f.begin() + o * len, x->f.begin() + (o + 1) * len);
    }
  return y;
}

inline Value slice(const Value& x, const Value& starts, const Value& ends, const Value& axes,
                   const Value* steps) {
  std::vector<int64_t> lo(x.dims.size(), 0), step(x.dims.size(), 1), out = x.dims;
  for (size_t j = 0; j < axes.i.size(); ++j) {
    const int64_t a = norm_axis(axes.i[j], x.dims.size()), d = x.dims[a];
    const int64_t s = steps ? steps->i[j] : 1;
    if (s <= 0) throw std::runtime_error("Slice: only positive steps");
    int64_t b = starts.i[j] < 0 ? starts.i[j] + d : starts.i[j];
    int64_t e = ends.i[j] < 0 ? ends.i[j] + d : std::min(ends.i[j], d);
    b = std::clamp<int64_t>(b, 0, d);
    e = std::clamp<int64_t>(e, 0, d);
    lo[a] = b;
    step[a] = s;
    out[a] = e > b ? (e - b + s - 1) / s : 0;
  }
  Value y;
  y.dims = out;
  y.f.resize(static_cast<size_t>(y.numel()));
  const auto so = strides_of(out), sx = strides_of(x.dims);
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t src = 0;
    for (size_t k = 0; k < out.size(); ++k)
      src += (lo[k] + ((e / so[k]) % out[k]) * step[k]) * sx[k];
    y.f[static_cast<size_t>(e)] = x.f[static_cast<size_t>(src)];
  }
  return y;
}

inline Value softmax(const onnx::NodeProto& n, const Value& x) {
  const int64_t axis = norm_axis(attr_i(n, "axis", -1), x.dims.size());
  int64_t outer, inner;
  split_axis(x.dims, axis, outer, inner);
  const int64_t d = x.dims[axis];
  Value y = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) -> float& {
        return y.f[static_cast<size_t>((o * d + j) * inner + in)];
      };
      float m = -std::numeric_limits<float>::infinity(), sum = 0;
      for (int64_t j = 0; j < d; ++j) m = std::max(m, at(j));
      for (int64_t j = 0; j < d; ++j) sum += (at(j) = std::exp(at(j) - m));
      for (int64_t j = 0; j < d; ++j) at(j) /= sum;
    }
  return y;
}

// MatMul of two 3-D values with one batch size (numpy's matmul for that case).
inline Value matmul(const Value& a, const Value& b) {
  if (a.dims.size() != 3 || b.dims.size() != 3 || a.dims[0] != b.dims[0] || a.dims[2] != b.dims[1])
    throw std::runtime_error("MatMul: only (B, M, K) x (B, K, N)");
  const int64_t B = a.dims[0], M = a.dims[1], K = a.dims[2], N = b.dims[2];
  Value y;
  y.dims = {B, M, N};
  y.f.assign(static_cast<size_t>(y.numel()), 0.f);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t nn = 0; nn < N; ++nn) {
        float acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += a.f[static_cast<size_t>((i * M + m) * K + k)] *
                 b.f[static_cast<size_t>((i * K + k) * N + nn)];
        y.f[static_cast<size_t>((i * M + m) * N + nn)] = acc;
      }
  return y;
}

// Transpose of a 3-D value by perm.
inline Value transpose(const onnx::NodeProto& n, const Value& x) {
  const auto perm = attr_ints(n, "perm", {2, 1, 0});
  if (x.dims.size() != 3 || perm.size() != 3) throw std::runtime_error("Transpose: 3-D only");
  Value y;
  for (int64_t p : perm) y.dims.push_back(x.dims[static_cast<size_t>(p)]);
  y.f.resize(x.f.size());
  int64_t at[3];
  for (at[0] = 0; at[0] < x.dims[0]; ++at[0])
    for (at[1] = 0; at[1] < x.dims[1]; ++at[1])
      for (at[2] = 0; at[2] < x.dims[2]; ++at[2]) {
        const int64_t i = at[perm[0]], j = at[perm[1]], k = at[perm[2]];
        y.f[static_cast<size_t>((i * y.dims[1] + j) * y.dims[2] + k)] =
            x.f[static_cast<size_t>((at[0] * x.dims[1] + at[1]) * x.dims[2] + at[2])];
      }
  return y;
}

inline Value reduce_sum(const onnx::NodeProto& n, const Value& x, const Value& axes) {
  if (axes.i.size() != 1) throw std::runtime_error("ReduceSum: one axis only");
  const int64_t axis = norm_axis(axes.i[0], x.dims.size());
  int64_t outer, inner;
  split_axis(x.dims, axis, outer, inner);
  const int64_t d = x.dims[axis];
  Value y;
  y.dims = x.dims;
  if (attr_i(n, "keepdims", 1))
    y.dims[axis] = 1;
  else
    y.dims.erase(y.dims.begin() + axis);
  y.f.assign(static_cast<size_t>(outer * inner), 0.f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < d; ++j)
      for (int64_t in = 0; in < inner; ++in)
        y.f[static_cast<size_t>(o * inner + in)] +=
            x.f[static_cast<size_t>((o * d + j) * inner + in)];
  return y;
}

inline Value reshape(const Value& x, const Value& shape) {
  Value y = x;
  y.dims.clear();
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.i.size(); ++k) {
    int64_t d = shape.i[k];
    if (d == 0) d = x.dims.at(k);
    if (d == -1) {
      infer = static_cast<int64_t>(k);
    } else {
      known *= d;
    }
    y.dims.push_back(d);
  }
  if (infer >= 0) y.dims[static_cast<size_t>(infer)] = x.numel() / known;
  if (y.numel() != x.numel()) throw std::runtime_error("Reshape: element count changes");
  return y;
}

// Runs the graph on its one input; returns its outputs by name.
inline std::map<std::string, Value> run(const onnx::ModelProto& m, const Value& input) {
  std::map<std::string, Value> v;
  for (const auto& t : m.graph().initializer()) v[t.name()] = from_proto(t);
  v[m.graph().input(0).name()] = input;
  for (const auto& n : m.graph().node()) {
    auto in = [&](int k) -> const Value& { return v.at(n.input(k)); };
    auto opt = [&](int k) -> const Value* {
      return k < n.input_size() && !n.input(k).empty() ? &v.at(n.input(k)) : nullptr;
    };
    const std::string& t = n.op_type();
    Value y;
    if (t == "Conv") {
      y = conv(n, in(0), in(1), opt(2));
    } else if (t == "BatchNormalization") {
      const float eps = attr(n, "epsilon") ? attr(n, "epsilon")->f() : 1e-5f;
      const Value &x = in(0), &g = in(1), &b = in(2), &mu = in(3), &var = in(4);
      y = x;
      const int64_t C = x.dims[1], hw = x.numel() / x.dims[0] / C;
      for (int64_t e = 0; e < x.numel(); ++e) {
        const size_t c = static_cast<size_t>((e / hw) % C);
        y.f[static_cast<size_t>(e)] =
            (x.f[static_cast<size_t>(e)] - mu.f[c]) / std::sqrt(var.f[c] + eps) * g.f[c] + b.f[c];
      }
    } else if (t == "Sigmoid" || t == "Relu") {
      y = in(0);
      for (float& f : y.f) f = t == "Relu" ? std::max(f, 0.f) : 1.f / (1.f + std::exp(-f));
    } else if (t == "Erf" || t == "Tanh") {
      y = in(0);
      for (float& f : y.f) f = t == "Erf" ? std::erf(f) : std::tanh(f);
    } else if (t == "Div") {
      y = broadcast(in(0), in(1), [](float a, float b) { return a / b; });
    } else if (t == "Add") {
      y = broadcast(in(0), in(1), [](float a, float b) { return a + b; });
    } else if (t == "Sub") {
      y = broadcast(in(0), in(1), [](float a, float b) { return a - b; });
    } else if (t == "Mul") {
      y = broadcast(in(0), in(1), [](float a, float b) { return a * b; });
    } else if (t == "MaxPool") {
      y = max_pool(n, in(0));
    } else if (t == "Resize") {
      y = resize_nearest(n, in(0), in(2));
    } else if (t == "Concat") {
      std::vector<const Value*> xs;
      for (int k = 0; k < n.input_size(); ++k) xs.push_back(&in(k));
      y = concat(n, xs);
    } else if (t == "Slice") {
      y = slice(in(0), in(1), in(2), in(3), opt(4));
    } else if (t == "Reshape") {
      y = reshape(in(0), in(1));
    } else if (t == "MatMul") {
      y = matmul(in(0), in(1));
    } else if (t == "Transpose") {
      y = transpose(n, in(0));
    } else if (t == "Softmax") {
      y = softmax(n, in(0));
    } else if (t == "ReduceSum") {
      y = reduce_sum(n, in(0), in(1));
    } else {
      throw std::runtime_error("onnx_eval: no evaluator for " + t);
    }
    v[n.output(0)] = std::move(y);
  }
  std::map<std::string, Value> out;
  for (const auto& o : m.graph().output()) out[o.name()] = v.at(o.name());
  return out;
}

}  // namespace hpcnet::test_util::onnx_eval
