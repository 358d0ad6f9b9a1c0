// A small reference interpreter of ONNX graphs for the export tests: runs a ModelProto on the
// host in plain float32 loops, straight from the operator specification (opset 17), for the node
// types hpcnet's exporter writes: Conv (grouped), ConvTranspose, BatchNormalization, Gemm, MatMul
// (3-D), Sigmoid, Relu, Erf, Tanh, Add, Sub, Mul, Div (numpy broadcasting), MaxPool,
// GlobalAveragePool, Resize (nearest and linear; scales or sizes), Concat (float or int64), Slice,
// Pad (constant), Shape, Reshape, Flatten, Transpose (3-D), Softmax, LogSoftmax, ReduceSum.
// Written for correctness, not speed. An unknown node type, an attribute a node's evaluator does
// not read, or an attribute value it does not implement is a test failure (std::runtime_error
// naming the node type and the attribute), never silently ignored.
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
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
  bool is_int = false;     // an int64 tensor (i), else float32 (f)
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
  if (p.data_type() != onnx::TensorProto::INT64 && p.data_type() != onnx::TensorProto::FLOAT)
    throw std::runtime_error("onnx_eval: initializer " + p.name() +
                             " is neither float32 nor int64");
  if (p.data_type() == onnx::TensorProto::INT64) {
    v.is_int = true;
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
inline float attr_f(const onnx::NodeProto& n, const std::string& name, float def) {
  const auto* a = attr(n, name);
  return a ? a->f() : def;
}
inline std::string attr_s(const onnx::NodeProto& n, const std::string& name, std::string def) {
  const auto* a = attr(n, name);
  return a ? a->s() : def;
}

[[noreturn]] inline void unsupported(const onnx::NodeProto& n, const std::string& what) {
  throw std::runtime_error("onnx_eval: " + n.op_type() + ": " + what + " is not implemented");
}
// Every attribute of n must be one its evaluator reads (the others would be silently ignored).
inline void only_attrs(const onnx::NodeProto& n, std::initializer_list<const char*> known) {
  for (const auto& a : n.attribute())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return a.name() == k; }))
      unsupported(n, "attribute '" + a.name() + "'");
}
// An ints attribute of a node over (N, C, H, W) (kernel_shape, strides, pads, ...), which must
// have as many values as its default.
inline std::vector<int64_t> attr_ints_2d(const onnx::NodeProto& n, const std::string& name,
                                         std::vector<int64_t> def) {
  std::vector<int64_t> v = attr_ints(n, name, def);
  if (v.size() != def.size())
    unsupported(n, "'" + name + "' of " + std::to_string(v.size()) + " values");
  return v;
}
inline void require_4d(const onnx::NodeProto& n, const std::vector<int64_t>& dims) {
  if (dims.size() != 4) unsupported(n, "an input of rank " + std::to_string(dims.size()));
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
    if (a.is_int || b.is_int) throw std::runtime_error("onnx_eval: arithmetic on int64 values");
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

// Conv: y[n, k, p, q] = b[k] + sum over the input channels c of k's group and the taps (r, s) of
// x[n, c, p stride - pad_begin + r dilation, q ...] w[k, c mod (C / group), r, s].
inline Value conv(const onnx::NodeProto& n, const Value& x, const Value& w, const Value* b) {
  only_attrs(n, {"group", "strides", "pads", "dilations", "kernel_shape"});
  require_4d(n, x.dims);
  require_4d(n, w.dims);
  const int64_t G = attr_i(n, "group", 1);  // output k reads input channels of its group
  const auto st = attr_ints_2d(n, "strides", {1, 1}), pd = attr_ints_2d(n, "pads", {0, 0, 0, 0}),
             dl = attr_ints_2d(n, "dilations", {1, 1});
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t K = w.dims[0], R = w.dims[2], S = w.dims[3], CG = w.dims[1];
  if (attr_ints_2d(n, "kernel_shape", {R, S}) != std::vector<int64_t>{R, S})
    throw std::runtime_error("Conv: kernel_shape differs from the weight's");
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

// ConvTranspose, x (N, C, H, W), w (C, M / group, R, S), b (M,): the output is
// stride (H - 1) + output_padding + dilation (R - 1) + 1 - pad_begin - pad_end high (the same
// across), and each input pixel x[n, c, h, w] adds x w[c, m, r, s] at output
// (h stride - pad_begin + r dilation, w stride - pad_begin + s dilation) of channel
// group(c) M / group + m; output_padding only adds rows and columns at the end (bias there).
// auto_pad and output_shape (pads derived from a requested size) are not implemented.
inline Value conv_transpose(const onnx::NodeProto& n, const Value& x, const Value& w,
                            const Value* b) {
  only_attrs(n, {"group", "strides", "pads", "dilations", "kernel_shape", "output_padding"});
  require_4d(n, x.dims);
  require_4d(n, w.dims);
  const int64_t G = attr_i(n, "group", 1);
  const auto st = attr_ints_2d(n, "strides", {1, 1}), pd = attr_ints_2d(n, "pads", {0, 0, 0, 0}),
             dl = attr_ints_2d(n, "dilations", {1, 1}),
             op = attr_ints_2d(n, "output_padding", {0, 0});
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t MG = w.dims[1], R = w.dims[2], S = w.dims[3], M = MG * G;
  if (attr_ints_2d(n, "kernel_shape", {R, S}) != std::vector<int64_t>{R, S})
    throw std::runtime_error("ConvTranspose: kernel_shape differs from the weight's");
  if (w.dims[0] != C || C % G != 0)
    throw std::runtime_error("ConvTranspose: weight does not fit the input channels or groups");
  if (b && b->numel() != M) throw std::runtime_error("ConvTranspose: bias is not (M,)");
  for (int k = 0; k < 2; ++k)
    if (op[k] < 0 || (op[k] >= st[k] && op[k] >= dl[k]))
      throw std::runtime_error("ConvTranspose: output_padding not below the stride or dilation");
  const int64_t P = st[0] * (H - 1) + op[0] + dl[0] * (R - 1) + 1 - pd[0] - pd[2];
  const int64_t Q = st[1] * (W - 1) + op[1] + dl[1] * (S - 1) + 1 - pd[1] - pd[3];
  Value y;
  y.dims = {N, M, P, Q};
  y.f.assign(static_cast<size_t>(y.numel()), 0.f);
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t e = 0; e < P * Q; ++e)
        y.f[static_cast<size_t>((nn * M + m) * P * Q + e)] = b ? b->f[static_cast<size_t>(m)] : 0.f;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t mg = 0; mg < MG; ++mg) {
        const int64_t m = c / (C / G) * MG + mg;
        for (int64_t h = 0; h < H; ++h)
          for (int64_t ww = 0; ww < W; ++ww) {
            const float xv = x.f[static_cast<size_t>(((nn * C + c) * H + h) * W + ww)];
            for (int64_t r = 0; r < R; ++r) {
              const int64_t p = h * st[0] - pd[0] + r * dl[0];
              if (p < 0 || p >= P) continue;
              for (int64_t s = 0; s < S; ++s) {
                const int64_t q = ww * st[1] - pd[1] + s * dl[1];
                if (q < 0 || q >= Q) continue;
                y.f[static_cast<size_t>(((nn * M + m) * P + p) * Q + q)] +=
                    xv * w.f[static_cast<size_t>(((c * MG + mg) * R + r) * S + s)];
              }
            }
          }
      }
  return y;
}

// Gemm: Y = alpha A' B' + beta C, A' = transA ? A^T : A (M, K), B' likewise (K, N), C
// unidirectionally broadcast to (M, N).
inline Value gemm(const onnx::NodeProto& n, const Value& a, const Value& b, const Value* c) {
  only_attrs(n, {"alpha", "beta", "transA", "transB"});
  if (a.dims.size() != 2 || b.dims.size() != 2) throw std::runtime_error("Gemm: A and B are 2-D");
  const bool ta = attr_i(n, "transA", 0) != 0, tb = attr_i(n, "transB", 0) != 0;
  const float alpha = attr_f(n, "alpha", 1.f), beta = attr_f(n, "beta", 1.f);
  const int64_t M = ta ? a.dims[1] : a.dims[0], K = ta ? a.dims[0] : a.dims[1];
  const int64_t N = tb ? b.dims[0] : b.dims[1];
  if ((tb ? b.dims[1] : b.dims[0]) != K) throw std::runtime_error("Gemm: inner sizes differ");
  std::vector<int64_t> cd(2, 1);  // C's dims right-aligned to (M, N)
  if (c) {
    if (c->dims.size() > 2) throw std::runtime_error("Gemm: C of rank > 2");
    std::copy(c->dims.begin(), c->dims.end(), cd.begin() + (2 - c->dims.size()));
    if ((cd[0] != 1 && cd[0] != M) || (cd[1] != 1 && cd[1] != N))
      throw std::runtime_error("Gemm: C does not broadcast to (M, N)");
  }
  Value y;
  y.dims = {M, N};
  y.f.resize(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += a.f[static_cast<size_t>(ta ? k * M + m : m * K + k)] *
               b.f[static_cast<size_t>(tb ? j * K + k : k * N + j)];
      float out = alpha * acc;
      if (c)
        out +=
            beta * c->f[static_cast<size_t>((cd[0] == 1 ? 0 : m) * cd[1] + (cd[1] == 1 ? 0 : j))];
      y.f[static_cast<size_t>(m * N + j)] = out;
    }
  return y;
}

inline Value max_pool(const onnx::NodeProto& n, const Value& x) {
  only_attrs(n, {"kernel_shape", "strides", "pads"});
  require_4d(n, x.dims);
  if (!attr(n, "kernel_shape")) throw std::runtime_error("MaxPool: kernel_shape is required");
  const auto ks = attr_ints_2d(n, "kernel_shape", {0, 0}), st = attr_ints_2d(n, "strides", {1, 1}),
             pd = attr_ints_2d(n, "pads", {0, 0, 0, 0});
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

// GlobalAveragePool: (N, C, d1, ...) -> (N, C, 1, ...), the mean over the spatial dims.
inline Value global_average_pool(const onnx::NodeProto& n, const Value& x) {
  only_attrs(n, {});
  if (x.dims.size() < 3) unsupported(n, "an input of rank " + std::to_string(x.dims.size()));
  const int64_t nc = x.dims[0] * x.dims[1], hw = x.numel() / nc;
  Value y;
  y.dims = x.dims;
  std::fill(y.dims.begin() + 2, y.dims.end(), 1);
  y.f.resize(static_cast<size_t>(nc));
  for (int64_t k = 0; k < nc; ++k) {
    float acc = 0;
    for (int64_t e = 0; e < hw; ++e) acc += x.f[static_cast<size_t>(k * hw + e)];
    y.f[static_cast<size_t>(k)] = acc / static_cast<float>(hw);
  }
  return y;
}

// Resize's source coordinate of output coordinate xr along an axis (the specification's
// coordinate_transformation_mode), scale = length_resized / length_original. For
// align_corners with length_resized 1 the specification's formula divides 0 by 0; 0, as
// onnxruntime and torch take.
inline float resize_source(const onnx::NodeProto& n, const std::string& ctm, float xr, float scale,
                           int64_t len_resized, int64_t len_original) {
  if (ctm == "half_pixel") return (xr + 0.5f) / scale - 0.5f;
  if (ctm == "pytorch_half_pixel") return len_resized > 1 ? (xr + 0.5f) / scale - 0.5f : 0.f;
  if (ctm == "asymmetric") return xr / scale;
  if (ctm == "align_corners")
    return len_resized == 1
               ? 0.f
               : xr * static_cast<float>(len_original - 1) / static_cast<float>(len_resized - 1);
  unsupported(n, "coordinate_transformation_mode '" + ctm + "'");
}

// nearest: the source index rounded by nearest_mode; linear: the two neighbours floor(xo) and
// floor(xo) + 1 with weights 1 - frac and frac, a neighbour outside [0, length - 1] taking the
// edge's value (the reference implementation pads the edges). One axis's taps: (index, weight).
inline std::vector<std::pair<int64_t, float>> resize_taps(const onnx::NodeProto& n,
                                                          const std::string& mode, float xo,
                                                          int64_t len) {
  auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, len - 1); };
  if (mode == "linear") {
    const float lo = std::floor(xo), frac = xo - lo;
    const auto i0 = static_cast<int64_t>(lo);
    return {{clampi(i0), 1.f - frac}, {clampi(i0 + 1), frac}};
  }
  const std::string nm = attr_s(n, "nearest_mode", "round_prefer_floor");
  float r;
  if (nm == "floor") {
    r = std::floor(xo);
  } else if (nm == "ceil") {
    r = std::ceil(xo);
  } else if (nm == "round_prefer_floor") {
    r = xo == std::floor(xo) + 0.5f ? std::floor(xo) : std::round(xo);
  } else if (nm == "round_prefer_ceil") {
    r = std::round(xo);  // halves away from zero: up for the xo > 0 that matter
  } else {
    unsupported(n, "nearest_mode '" + nm + "'");
  }
  return {{clampi(static_cast<int64_t>(r)), 1.f}};
}

// Resize of a 4-D x over H and W (dims 0 and 1 must keep their sizes), mode nearest or linear,
// from scales (float32, output = floor(input scale)) or sizes (int64, scale = output / input).
// cubic, exclude_outside and tf_crop_and_resize (with roi and extrapolation_value) are not
// implemented.
inline Value resize(const onnx::NodeProto& n, const Value& x, const Value* scales,
                    const Value* sizes) {
  only_attrs(n, {"mode", "coordinate_transformation_mode", "nearest_mode"});
  require_4d(n, x.dims);
  const std::string mode = attr_s(n, "mode", "nearest");
  const std::string ctm = attr_s(n, "coordinate_transformation_mode", "half_pixel");
  if (mode != "nearest" && mode != "linear") unsupported(n, "mode '" + mode + "'");
  if (scales && scales->numel() == 0) scales = nullptr;  // an empty tensor is "not given"
  if ((scales == nullptr) == (sizes == nullptr))
    throw std::runtime_error("Resize: exactly one of scales and sizes");
  std::vector<int64_t> out(4);
  std::vector<float> scale(4);
  for (size_t k = 0; k < 4; ++k) {
    if (sizes) {
      out[k] = sizes->i.at(k);
      scale[k] = static_cast<float>(out[k]) / static_cast<float>(x.dims[k]);
    } else {
      scale[k] = scales->f.at(k);
      out[k] = static_cast<int64_t>(std::floor(static_cast<float>(x.dims[k]) * scale[k]));
    }
  }
  if (out[0] != x.dims[0] || out[1] != x.dims[1]) unsupported(n, "resizing dims 0 or 1");
  const int64_t H = x.dims[2], W = x.dims[3], P = out[2], Q = out[3];
  Value y;
  y.dims = out;
  y.f.resize(static_cast<size_t>(y.numel()));
  for (int64_t p = 0; p < P; ++p) {
    const auto th =
        resize_taps(n, mode, resize_source(n, ctm, static_cast<float>(p), scale[2], P, H), H);
    for (int64_t q = 0; q < Q; ++q) {
      const auto tw =
          resize_taps(n, mode, resize_source(n, ctm, static_cast<float>(q), scale[3], Q, W), W);
      for (int64_t nc = 0; nc < out[0] * out[1]; ++nc) {
        float acc = 0;
        for (const auto& [h, wh] : th)
          for (const auto& [w, ww] : tw)
            acc += wh * ww * x.f[static_cast<size_t>((nc * H + h) * W + w)];
        y.f[static_cast<size_t>((nc * P + p) * Q + q)] = acc;
      }
    }
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

// Concat of float32 or of int64 values (Shape's output and a constant, say).
inline Value concat(const onnx::NodeProto& n, const std::vector<const Value*>& xs) {
  only_attrs(n, {"axis"});
  const int64_t axis = norm_axis(attr_i(n, "axis", 0), xs[0]->dims.size());
  Value y;
  y.dims = xs[0]->dims;
  y.is_int = xs[0]->is_int;
  y.dims[axis] = 0;
  for (const Value* x : xs) {
    if (x->is_int != y.is_int) throw std::runtime_error("Concat: mixed int64 and float32 inputs");
    y.dims[axis] += x->dims[axis];
  }
  int64_t outer, inner;
  split_axis(y.dims, axis, outer, inner);
  for (int64_t o = 0; o < outer; ++o)
    for (const Value* x : xs) {
      const int64_t len = x->dims[axis] * inner;
      if (y.is_int)
        y.i.insert(y.i.end(), x->i.begin() + o * len, x->i.begin() + (o + 1) * len);
      else
        y.f.insert(y.f.end(), x->f.begin() + o * len, x->f.begin() + (o + 1) * len);
    }
  return y;
}

inline Value slice(const Value& x, const Value& starts, const Value& ends, const Value& axes,
                   const Value* steps) {
  if (x.is_int) throw std::runtime_error("Slice: float32 data only");
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

// Pad, mode constant: pads (int64, 2 rank values: every axis's begin, then every axis's end;
// negative ones remove), the new elements constant_value (a float32 scalar; 0 when absent).
// edge and reflect are not implemented.
inline Value pad(const onnx::NodeProto& n, const Value& x, const Value& pads,
                 const Value* constant) {
  only_attrs(n, {"mode"});
  if (attr_s(n, "mode", "constant") != "constant")
    unsupported(n, "mode '" + attr_s(n, "mode", "constant") + "'");
  const size_t r = x.dims.size();
  if (!pads.is_int || pads.i.size() != 2 * r)
    throw std::runtime_error("Pad: pads is not 2 rank int64");
  if (constant && constant->numel() != 1)
    throw std::runtime_error("Pad: constant_value not a scalar");
  const float value = constant ? constant->f[0] : 0.f;
  Value y;
  for (size_t k = 0; k < r; ++k) y.dims.push_back(x.dims[k] + pads.i[k] + pads.i[k + r]);
  y.f.assign(static_cast<size_t>(y.numel()), value);
  const auto so = strides_of(y.dims), sx = strides_of(x.dims);
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t src = 0;
    bool inside = true;
    for (size_t k = 0; k < r && inside; ++k) {
      const int64_t c = (e / so[k]) % y.dims[k] - pads.i[k];
      inside = c >= 0 && c < x.dims[k];
      src += c * sx[k];
    }
    if (inside) y.f[static_cast<size_t>(e)] = x.f[static_cast<size_t>(src)];
  }
  return y;
}

// Shape: x's dims [start, end) as int64 (negative counts from the end; both clamped to [0, r]).
inline Value shape_of(const onnx::NodeProto& n, const Value& x) {
  only_attrs(n, {"start", "end"});
  const auto r = static_cast<int64_t>(x.dims.size());
  auto clamp_axis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
  const int64_t b = clamp_axis(attr_i(n, "start", 0)), e = clamp_axis(attr_i(n, "end", r));
  Value y;
  y.is_int = true;
  if (e > b) y.i.assign(x.dims.begin() + b, x.dims.begin() + e);
  y.dims = {static_cast<int64_t>(y.i.size())};
  return y;
}

// Softmax (log_softmax false) or LogSoftmax over `axis` (default -1).
inline Value softmax(const onnx::NodeProto& n, const Value& x, bool log_softmax) {
  only_attrs(n, {"axis"});
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
      for (int64_t j = 0; j < d; ++j) sum += std::exp(at(j) - m);
      for (int64_t j = 0; j < d; ++j)
        at(j) = log_softmax ? at(j) - m - std::log(sum) : std::exp(at(j) - m) / sum;
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
  only_attrs(n, {"perm"});
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
  only_attrs(n, {"keepdims"});
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

inline Value reshape(const onnx::NodeProto& n, const Value& x, const Value& shape) {
  only_attrs(n, {});  // allowzero (0 keeps the input's dim; 1 would make it 0) not implemented
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

// Flatten: (d0, ..., dn) -> (d0 ... d(axis - 1), d(axis) ... dn); axis in [-r, r], default 1.
inline Value flatten(const onnx::NodeProto& n, const Value& x) {
  only_attrs(n, {"axis"});
  const int64_t axis = norm_axis(attr_i(n, "axis", 1), x.dims.size());
  if (axis < 0 || axis > static_cast<int64_t>(x.dims.size()))
    throw std::runtime_error("Flatten: axis out of range");
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= x.dims[static_cast<size_t>(k)];
  Value y = x;
  y.dims = {outer, x.numel() / std::max<int64_t>(outer, 1)};
  return y;
}

inline Value batch_norm(const onnx::NodeProto& n, const Value& x, const Value& g, const Value& b,
                        const Value& mu, const Value& var) {
  // momentum only updates running statistics in training_mode, which is not implemented.
  only_attrs(n, {"epsilon", "momentum"});
  const float eps = attr_f(n, "epsilon", 1e-5f);
  Value y = x;
  const int64_t C = x.dims[1], hw = x.numel() / x.dims[0] / C;
  for (int64_t e = 0; e < x.numel(); ++e) {
    const size_t c = static_cast<size_t>((e / hw) % C);
    y.f[static_cast<size_t>(e)] =
        (x.f[static_cast<size_t>(e)] - mu.f[c]) / std::sqrt(var.f[c] + eps) * g.f[c] + b.f[c];
  }
  return y;
}

// Elementwise nodes without attributes: unary (Sigmoid, Relu, Erf, Tanh) and binary with
// broadcasting (Add, Sub, Mul, Div); false when t is neither.
inline bool elementwise(const onnx::NodeProto& n, const std::string& t,
                        const std::vector<const Value*>& in, Value& y) {
  using Unary = float (*)(float);
  using Binary = float (*)(float, float);
  static const std::map<std::string, Unary> unary = {
      {"Sigmoid", [](float f) { return 1.f / (1.f + std::exp(-f)); }},
      {"Relu", [](float f) { return std::max(f, 0.f); }},
      {"Erf", [](float f) { return std::erf(f); }},
      {"Tanh", [](float f) { return std::tanh(f); }}};
  static const std::map<std::string, Binary> binary = {
      {"Add", [](float a, float b) { return a + b; }},
      {"Sub", [](float a, float b) { return a - b; }},
      {"Mul", [](float a, float b) { return a * b; }},
      {"Div", [](float a, float b) { return a / b; }}};
  if (auto u = unary.find(t); u != unary.end()) {
    only_attrs(n, {});
    if (in[0]->is_int) throw std::runtime_error("onnx_eval: " + t + " of int64 values");
    y = *in[0];
    for (float& f : y.f) f = u->second(f);
    return true;
  }
  if (auto b = binary.find(t); b != binary.end()) {
    only_attrs(n, {});
    y = broadcast(*in[0], *in[1], b->second);
    return true;
  }
  return false;
}

// One node's output from its inputs (nullptr for an absent optional one).
inline Value eval_node(const onnx::NodeProto& n, const std::vector<const Value*>& in) {
  const std::string& t = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") unsupported(n, "domain '" + n.domain() + "'");
  if (n.output_size() != 1) unsupported(n, std::to_string(n.output_size()) + " outputs");
  auto at = [&](size_t k) -> const Value& {
    if (k >= in.size() || !in[k])
      throw std::runtime_error("onnx_eval: " + t + " lacks input " + std::to_string(k));
    return *in[k];
  };
  auto opt = [&](size_t k) { return k < in.size() ? in[k] : nullptr; };
  Value y;
  if (elementwise(n, t, in, y)) return y;
  if (t == "Conv") return conv(n, at(0), at(1), opt(2));
  if (t == "ConvTranspose") return conv_transpose(n, at(0), at(1), opt(2));
  if (t == "Gemm") return gemm(n, at(0), at(1), opt(2));
  if (t == "BatchNormalization") return batch_norm(n, at(0), at(1), at(2), at(3), at(4));
  if (t == "MaxPool") return max_pool(n, at(0));
  if (t == "GlobalAveragePool") return global_average_pool(n, at(0));
  if (t == "Resize") {
    if (opt(1) && opt(1)->numel() != 0) unsupported(n, "roi (tf_crop_and_resize)");
    return resize(n, at(0), opt(2), opt(3));
  }
  if (t == "Concat") {
    std::vector<const Value*> xs;
    for (size_t k = 0; k < in.size(); ++k) xs.push_back(&at(k));
    return concat(n, xs);
  }
  if (t == "Slice") {
    only_attrs(n, {});
    return slice(at(0), at(1), at(2), at(3), opt(4));
  }
  if (t == "Pad") return pad(n, at(0), at(1), opt(2));
  if (t == "Shape") return shape_of(n, at(0));
  if (t == "Reshape") return reshape(n, at(0), at(1));
  if (t == "Flatten") return flatten(n, at(0));
  if (t == "MatMul") {
    only_attrs(n, {});
    return matmul(at(0), at(1));
  }
  if (t == "Transpose") return transpose(n, at(0));
  if (t == "Softmax" || t == "LogSoftmax") return softmax(n, at(0), t == "LogSoftmax");
  if (t == "ReduceSum") return reduce_sum(n, at(0), at(1));
  throw std::runtime_error("onnx_eval: no evaluator for " + t);
}

// Runs the graph on its one input; returns its outputs by name.
inline std::map<std::string, Value> run(const onnx::ModelProto& m, const Value& input) {
  std::map<std::string, Value> v;
  for (const auto& t : m.graph().initializer()) v[t.name()] = from_proto(t);
  v[m.graph().input(0).name()] = input;
  for (const auto& n : m.graph().node()) {
    std::vector<const Value*> in;
    for (const auto& name : n.input()) in.push_back(name.empty() ? nullptr : &v.at(name));
    v[n.output(0)] = eval_node(n, in);
  }
  std::map<std::string, Value> out;
  for (const auto& o : m.graph().output()) out[o.name()] = v.at(o.name());
  return out;
}

}  // namespace hpcnet::test_util::onnx_eval
