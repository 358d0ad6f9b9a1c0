// CPU fully-connected layer: float32 through oneDNN inner product (forward with fused bias and
// optional ReLU, backward data, backward weights with bias), float64 through reference loops.
#include <cstring>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/dnnl_util.h"

namespace hpcnet::cpu {
namespace {

using dnnl::memory;

struct LinearMds {
  memory::desc x, w, b, y;
};
LinearMds linear_mds(int64_t n, int64_t in, int64_t out) {
  return {plain_md({n, in}), plain_md({out, in}), plain_md({out}), plain_md({n, out})};
}

dnnl::inner_product_forward::primitive_desc ip_fwd_pd(const LinearMds& m, bool bias, bool relu) {
  using namespace dnnl;
  auto d = bias ? inner_product_forward::desc(prop_kind::forward_training, m.x, m.w, m.b, m.y)
                : inner_product_forward::desc(prop_kind::forward_training, m.x, m.w, m.y);
  primitive_attr attr;
  if (relu) {
    post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  return inner_product_forward::primitive_desc(d, attr, dnnl_engine());
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, bool relu) {
  int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  bool has_b = b.defined();
  if (x.dtype() == DType::kFloat64) {
    const double* px = x.data<double>();
    const double* pw = w.data<double>();
    const double* pb = has_b ? b.data<double>() : nullptr;
    double* py = y.data<double>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double acc = pb ? pb[o] : 0.0;
        for (int64_t k = 0; k < in; ++k) acc += px[i * in + k] * pw[o * in + k];
        py[i * out + o] = (relu && acc < 0) ? 0.0 : acc;
      }
    return;
  }
  DnnlOp& e = dnnl_cached(make_key(10, n, in, out, has_b, relu), [&](DnnlOp& op) {
    LinearMds m = linear_mds(n, in, out);
    op.prim = dnnl::inner_product_forward(ip_fwd_pd(m, has_b, relu));
    op.add_arg(DNNL_ARG_SRC, m.x);
    op.add_arg(DNNL_ARG_WEIGHTS, m.w);
    if (has_b) op.add_arg(DNNL_ARG_BIAS, m.b);
    op.add_arg(DNNL_ARG_DST, m.y);
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_WEIGHTS, w);
  if (has_b) e.bind(DNNL_ARG_BIAS, b);
  e.bind(DNNL_ARG_DST, y);
  SmallWorkSerial serial(static_cast<double>(n) * in * out);
  e.run();
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  int64_t n = dy.size(0), out = w.size(0), in = w.size(1);
  if (dy.dtype() == DType::kFloat64) {
    const double* pdy = dy.data<double>();
    const double* pw = w.data<double>();
    double* pdx = dx.data<double>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < in; ++k) {
        double acc = 0;
        for (int64_t o = 0; o < out; ++o) acc += pdy[i * out + o] * pw[o * in + k];
        pdx[i * in + k] = acc;
      }
    return;
  }
  DnnlOp& e = dnnl_cached(make_key(11, n, in, out), [&](DnnlOp& op) {
    using namespace dnnl;
    LinearMds m = linear_mds(n, in, out);
    inner_product_backward_data::desc d(m.x, m.w, m.y);
    op.prim = inner_product_backward_data(inner_product_backward_data::primitive_desc(
        d, dnnl_engine(), ip_fwd_pd(m, false, false)));
    op.add_arg(DNNL_ARG_DIFF_DST, m.y);
    op.add_arg(DNNL_ARG_WEIGHTS, m.w);
    op.add_arg(DNNL_ARG_DIFF_SRC, m.x);
  });
  e.bind(DNNL_ARG_DIFF_DST, dy);
  e.bind(DNNL_ARG_WEIGHTS, w);
  e.bind(DNNL_ARG_DIFF_SRC, dx);
  SmallWorkSerial serial(static_cast<double>(n) * in * out);
  e.run();
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  int64_t n = x.size(0), in = x.size(1), out = dw.size(0);
  bool has_b = db.defined();
  if (x.dtype() == DType::kFloat64) {
    const double* px = x.data<double>();
    const double* pdy = dy.data<double>();
    double* pdw = dw.data<double>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += pdy[i * out + o] * px[i * in + k];
        pdw[o * in + k] = acc;
      }
    if (has_b) {
      double* pdb = db.data<double>();
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += pdy[i * out + o];
        pdb[o] = acc;
      }
    }
    return;
  }
  DnnlOp& e = dnnl_cached(make_key(12, n, in, out, has_b), [&](DnnlOp& op) {
    using namespace dnnl;
    LinearMds m = linear_mds(n, in, out);
    auto d = has_b ? inner_product_backward_weights::desc(m.x, m.w, m.b, m.y)
                   : inner_product_backward_weights::desc(m.x, m.w, m.y);
    op.prim = inner_product_backward_weights(inner_product_backward_weights::primitive_desc(
        d, dnnl_engine(), ip_fwd_pd(m, has_b, false)));
    op.add_arg(DNNL_ARG_SRC, m.x);
    op.add_arg(DNNL_ARG_DIFF_DST, m.y);
    op.add_arg(DNNL_ARG_DIFF_WEIGHTS, m.w);
    if (has_b) op.add_arg(DNNL_ARG_DIFF_BIAS, m.b);
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_DIFF_DST, dy);
  e.bind(DNNL_ARG_DIFF_WEIGHTS, dw);
  if (has_b) e.bind(DNNL_ARG_DIFF_BIAS, db);
  SmallWorkSerial serial(static_cast<double>(n) * in * out);
  e.run();
}

}  // namespace hpcnet::cpu
