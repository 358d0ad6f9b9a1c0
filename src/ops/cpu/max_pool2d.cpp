// CPU max pooling: float32 through oneDNN (training forward keeps oneDNN's workspace of argmax
// positions for the backward), float64 through reference loops (workspace: int64 argmax index
// into the input plane, -1 where a window saw only padding).
#include <cstring>
#include <limits>

#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/cpu/dnnl_util.h"

namespace hpcnet::cpu {
namespace {

using dnnl::memory;

struct PoolMds {
  memory::desc x, y;
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolMds pool_mds(const Shape& xs, const Shape& ys, const Pool2dParams& p) {
  PoolMds m;
  m.x = plain_md({xs[0], xs[1], xs[2], xs[3]});
  m.y = plain_md({ys[0], ys[1], ys[2], ys[3]});
  m.strides = {p.stride_h, p.stride_w};
  m.kernel = {p.kernel_h, p.kernel_w};
  m.pad_l = {p.pad_h, p.pad_w};
  m.pad_r = {(ys[2] - 1) * p.stride_h + p.kernel_h - xs[2] - p.pad_h,
             (ys[3] - 1) * p.stride_w + p.kernel_w - xs[3] - p.pad_w};
  return m;
}

dnnl::pooling_forward::primitive_desc pool_fwd_pd(const PoolMds& m, bool training) {
  using namespace dnnl;
  pooling_forward::desc d(training ? prop_kind::forward_training : prop_kind::forward_inference,
                          algorithm::pooling_max, m.x, m.y, m.strides, m.kernel, m.pad_l, m.pad_r);
  return pooling_forward::primitive_desc(d, dnnl_engine());
}

DnnlKey pool_key(int kind, const Shape& xs, const Pool2dParams& p) {
  return make_key(kind, xs[0], xs[1], xs[2], xs[3], p.kernel_h, p.kernel_w, p.stride_h,
                  p.stride_w, p.pad_h, p.pad_w);
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor* workspace, const Pool2dParams& p) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  if (x.dtype() == DType::kFloat64) {
    int64_t planes = xs[0] * xs[1], H = xs[2], W = xs[3], P = ys[2], Q = ys[3];
    if (workspace) *workspace = Tensor::empty(ys, DType::kInt64);
    const double* px = x.data<double>();
    double* py = y.data<double>();
    int64_t* pi = workspace ? workspace->data<int64_t>() : nullptr;
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t oh = 0; oh < P; ++oh)
        for (int64_t ow = 0; ow < Q; ++ow) {
          double best = -std::numeric_limits<double>::infinity();
          int64_t arg = -1;
          for (int64_t r = 0; r < p.kernel_h; ++r) {
            int64_t ih = oh * p.stride_h - p.pad_h + r;
            if (ih < 0 || ih >= H) continue;
            for (int64_t t = 0; t < p.kernel_w; ++t) {
              int64_t iw = ow * p.stride_w - p.pad_w + t;
              if (iw < 0 || iw >= W) continue;
              double v = px[pl * H * W + ih * W + iw];
              if (arg < 0 || v > best) {
                best = v;
                arg = ih * W + iw;
              }
            }
          }
          py[(pl * P + oh) * Q + ow] = best;
          if (pi) pi[(pl * P + oh) * Q + ow] = arg;
        }
    return;
  }
  bool training = workspace != nullptr;
  DnnlOp& e = dnnl_cached(pool_key(training ? 0 : 1, xs, p), [&](DnnlOp& op) {
    PoolMds m = pool_mds(xs, ys, p);
    auto pd = pool_fwd_pd(m, training);
    op.prim = dnnl::pooling_forward(pd);
    op.add_arg(DNNL_ARG_SRC, m.x);
    op.add_arg(DNNL_ARG_DST, m.y);
    if (training) op.add_arg(DNNL_ARG_WORKSPACE, pd.workspace_desc());
  });
  e.bind(DNNL_ARG_SRC, x);
  e.bind(DNNL_ARG_DST, y);
  if (training) {
    size_t ws_bytes = e.args.at(DNNL_ARG_WORKSPACE).get_desc().get_size();
    if (!workspace->defined() || workspace->nbytes() != ws_bytes)
      *workspace = Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::kUInt8);
    e.bind(DNNL_ARG_WORKSPACE, *workspace);
  }
  e.run();
}

void max_pool2d_backward(const Tensor& dy, const Tensor& workspace, Tensor& dx,
                         const Pool2dParams& p) {
  const Shape& xs = dx.shape();
  const Shape& ys = dy.shape();
  if (dy.dtype() == DType::kFloat64) {
    int64_t planes = xs[0] * xs[1], HW = xs[2] * xs[3], PQ = ys[2] * ys[3];
    const double* pdy = dy.data<double>();
    const int64_t* pi = workspace.data<int64_t>();
    double* pdx = dx.data<double>();
    std::memset(pdx, 0, dx.nbytes());
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < PQ; ++i) {
        int64_t arg = pi[pl * PQ + i];
        if (arg >= 0) pdx[pl * HW + arg] += pdy[pl * PQ + i];
      }
    return;
  }
  DnnlOp& e = dnnl_cached(pool_key(2, xs, p), [&](DnnlOp& op) {
    using namespace dnnl;
    PoolMds m = pool_mds(xs, ys, p);
    auto fwd = pool_fwd_pd(m, true);
    pooling_backward::desc d(algorithm::pooling_max, m.x, m.y, m.strides, m.kernel, m.pad_l,
                             m.pad_r);
    op.prim = pooling_backward(pooling_backward::primitive_desc(d, dnnl_engine(), fwd));
    op.add_arg(DNNL_ARG_DIFF_DST, m.y);
    op.add_arg(DNNL_ARG_WORKSPACE, fwd.workspace_desc());
    op.add_arg(DNNL_ARG_DIFF_SRC, m.x);
  });
  e.bind(DNNL_ARG_DIFF_DST, dy);
  e.bind(DNNL_ARG_WORKSPACE, workspace);
  e.bind(DNNL_ARG_DIFF_SRC, dx);
  e.run();
}

}  // namespace hpcnet::cpu
