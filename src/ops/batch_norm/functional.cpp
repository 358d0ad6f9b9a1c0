// batch_norm: F::batch_norm / F::batch_norm_act. The fused form computes
// relu(batch_norm(x) + residual) in one pass (the tail of a ResNet block); its backward first
// masks the gradient with the saved output (relu), which is also the residual's gradient, then
// runs the batch-norm backward:
//   training: dx = w invstd (g - mean(g) - xhat mean(g xhat)),  eval: dx = w invstd g,
//   dweight = sum(g xhat),  dbias = sum(g)   (sums and means over N, H, W per channel).
#include <algorithm>
#include <vector>

#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {
struct BatchNormNode : Node {
  Tensor x, weight, y, save_mean, save_invstd;  // y kept only with relu (for the mask)
  ops::BatchNormParams p;
  bool has_weight = false, has_bias = false, has_residual = false;
  const char* name() const override { return "BatchNormBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor g = ops::as_layout(grad_out, x);
    if (p.relu) {
      Tensor masked = Tensor::empty_layout(g.shape(), g.dtype(), g.device(), g.layout());
      ops::relu_backward(g, y, masked);
      g = masked;
    }
    Tensor dx, dw, db;
    if (edges[0].active()) dx = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
    if (has_weight && edges[1].active()) dw = Tensor::empty(weight.shape(), x.dtype(), x.device());
    if (has_bias && edges[2].active()) db = Tensor::empty({x.size(1)}, x.dtype(), x.device());
    if (dx.defined() || dw.defined() || db.defined())
      ops::batch_norm_backward(g, x, weight, save_mean, save_invstd, dx, dw, db, p);
    return {dx, dw, db, has_residual && edges[3].active() ? g : Tensor()};
  }
  void release() override { x = weight = y = save_mean = save_invstd = Tensor(); }
};

void check_channel_vector(const Tensor& t, int64_t c, DType dtype, const char* what) {
  if (!t.defined()) return;
  HPCNET_CHECK(t.dim() == 1 && t.size(0) == c,
               std::string("batch_norm: ") + what + " must be (" + std::to_string(c) + ",), got " +
                   shape_str(t.shape()));
  ops::detail::check_dtype(op_name::batch_norm, t, dtype, what);
}
// The arguments' checks of batch_norm_act and sync_batch_norm_act.
void check_bn_args(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var, bool training,
                   double momentum, double eps, const Tensor& residual_in) {
  HPCNET_CHECK(x_in.defined(), "batch_norm: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 4, "batch_norm: input must be (N, C, H, W), got " +
                                    shape_str(x_in.shape()));
  HPCNET_CHECK(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
               std::string("batch_norm: input must be float32 or float64, got ") +
                   dtype_name(x_in.dtype()) + " " + shape_str(x_in.shape()));
  const int64_t c = x_in.size(1);
  check_channel_vector(weight, c, x_in.dtype(), "weight");
  check_channel_vector(bias, c, x_in.dtype(), "bias");
  check_channel_vector(running_mean, c, x_in.dtype(), "running_mean");
  check_channel_vector(running_var, c, x_in.dtype(), "running_var");
  HPCNET_CHECK(training || (running_mean.defined() && running_var.defined()),
               "batch_norm: eval mode needs running_mean and running_var");
  // Values per channel as torch counts them (N H W; also for 0 channels).
  const int64_t per_channel = x_in.size(0) * x_in.size(2) * x_in.size(3);
  HPCNET_CHECK(!training || per_channel > 1,
               "batch_norm: training needs more than one value per channel, got input " +
                   shape_str(x_in.shape()));
  HPCNET_CHECK(eps > 0 && momentum >= 0 && momentum <= 1,
               "batch_norm: need eps > 0 and 0 <= momentum <= 1, got eps " + std::to_string(eps) +
                   " and momentum " + std::to_string(momentum));
  if (residual_in.defined())
    HPCNET_CHECK(residual_in.shape() == x_in.shape(),
                 "batch_norm: residual " + shape_str(residual_in.shape()) +
                     " must have the input's shape " + shape_str(x_in.shape()));
}
}  // namespace

Tensor F::batch_norm_act(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training,
                         double momentum, double eps, const Tensor& residual_in, bool relu) {
  check_bn_args(x_in, weight, bias, running_mean, running_var, training, momentum, eps,
                residual_in);
  const int64_t c = x_in.size(1);
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();  // keeps a blocked layout
  Tensor residual = ops::as_layout(residual_in, x);
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  Tensor save_mean = Tensor::empty({c}, x.dtype(), x.device());
  Tensor save_invstd = Tensor::empty({c}, x.dtype(), x.device());
  ops::BatchNormParams p{eps, momentum, training, relu};
  Tensor rm = running_mean, rv = running_var;
  {
    NoGradGuard no_grad;  // the running statistics are buffers, never part of a graph
    ops::batch_norm_forward(x, weight, bias, residual, rm, rv, y, save_mean, save_invstd, p);
  }
  if (any_requires_grad({&x_in, &weight, &bias, &residual_in})) {
    auto node = std::make_shared<BatchNormNode>();
    node->x = x;
    node->weight = weight;
    if (relu) node->y = y.detach();  // not y: y -> grad_fn -> node -> y would be a cycle
    node->save_mean = save_mean;
    node->save_invstd = save_invstd;
    node->p = p;
    node->has_weight = weight.defined();
    node->has_bias = bias.defined();
    node->has_residual = residual_in.defined();
    record(node, {&x_in, &weight, &bias, &residual_in}, y);
  }
  trace::add(op_record::batch_norm, {x_in, weight, bias, running_mean, running_var, residual_in}, y,
             {{"training", training}, {"eps", eps}, {op_name::relu, relu}});
  return y;
}

Tensor F::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool training,
                     double momentum, double eps) {
  return batch_norm_act(x, weight, bias, running_mean, running_var, training, momentum, eps,
                        Tensor(), false);
}


namespace {
// A per-channel tensor's values as doubles on the host.
std::vector<double> host_values(const Tensor& t) {
  Tensor h = t.to(Device{}).to(DType::kFloat64);
  const double* p = h.data<double>();
  return std::vector<double>(p, p + h.numel());
}
// Per-channel values as a (C,) tensor of like's dtype on like's device.
Tensor channel_tensor(const std::vector<double>& v, const Tensor& like) {
  return Tensor::from_vector_f64(v, {static_cast<int64_t>(v.size())})
      .to(like.dtype())
      .to(like.device());
}

// Backward of sync_batch_norm_act. With the global mean and invstd, this rank's sums
// G_r = sum(g), GX_r = sum(g (x - mean)) come from the eval-mode kernel (db = G_r,
// dw = invstd GX_r, dx0 = w invstd g); the ranks' sums give G and GX, and
//   dx = dx0 + c0 + c1 (x - mean),  c0 = -w invstd G / M,  c1 = -w invstd^3 GX / M
// is one more eval-mode batch norm: x about the mean with unit scale (running var 0, eps 1),
// weight c1, bias c0 and dx0 as its residual.
struct SyncBatchNormNode : Node {
  Tensor x, weight, y, mean, invstd;  // y kept only with relu (for the mask)
  double count = 0;                   // values per channel over every rank
  F::RankSum sum;
  bool relu = false, has_weight = false, has_bias = false, has_residual = false;
  const char* name() const override { return "SyncBatchNormBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor g = ops::as_layout(grad_out, x);
    if (relu) {
      Tensor masked = Tensor::empty_layout(g.shape(), g.dtype(), g.device(), g.layout());
      ops::relu_backward(g, y, masked);
      g = masked;
    }
    const int64_t c = x.size(1);
    Tensor dx0 = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
    Tensor dw = Tensor::empty({c}, x.dtype(), x.device());
    Tensor db = Tensor::empty({c}, x.dtype(), x.device());
    ops::batch_norm_backward(g, x, weight, mean, invstd, dx0, dw, db,
                             ops::BatchNormParams{1.0, 0.0, false, false});
    const std::vector<double> vdb = host_values(db), vdw = host_values(dw),
                              vis = host_values(invstd);
    std::vector<double> sums(2 * static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) {
      sums[i] = vdb[i];
      sums[c + i] = vdw[i] / vis[i];
    }
    if (sum) sum(sums.data(), sums.size());  // on every rank, whatever this rank needs
    const std::vector<double> vw =
        has_weight ? host_values(weight) : std::vector<double>(static_cast<size_t>(c), 1.0);
    std::vector<double> c0(c), c1(c);
    for (int64_t i = 0; i < c; ++i) {
      const double k = vw[i] * vis[i];
      c0[i] = -k * sums[i] / count;
      c1[i] = -k * vis[i] * vis[i] * sums[c + i] / count;
    }
    Tensor dx;
    if (edges[0].active()) {
      dx = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
      Tensor m = mean, unit = Tensor::zeros({c}, x.dtype(), x.device());
      Tensor sm = Tensor::empty({c}, x.dtype(), x.device()), si = sm.clone();
      ops::batch_norm_forward(x, channel_tensor(c1, x), channel_tensor(c0, x), dx0, m, unit, dx,
                              sm, si, ops::BatchNormParams{1.0, 0.0, false, false});
    }
    return {dx, has_weight && edges[1].active() ? dw : Tensor(),
            has_bias && edges[2].active() ? db : Tensor(),
            has_residual && edges[3].active() ? g : Tensor()};
  }
  void release() override { x = weight = y = mean = invstd = Tensor(); }
};
}  // namespace

Tensor F::sync_batch_norm_act(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var,
                              double momentum, double eps, const Tensor& residual_in, bool relu,
                              const RankSum& sum) {
  check_bn_args(x_in, weight, bias, running_mean, running_var, true, momentum, eps, residual_in);
  const int64_t c = x_in.size(1);
  Tensor x = x_in.is_dense() ? x_in : x_in.contiguous();  // keeps a blocked layout
  Tensor residual = ops::as_layout(residual_in, x);
  const double m = static_cast<double>(x.size(0) * x.size(2) * x.size(3));
  Tensor y = Tensor::empty_layout(x.shape(), x.dtype(), x.device(), x.layout());
  Tensor save_mean = Tensor::empty({c}, x.dtype(), x.device());
  Tensor save_invstd = Tensor::empty({c}, x.dtype(), x.device());
  double count = m;
  {
    NoGradGuard no_grad;
    // This rank's mean and variance (the training kernel, eps ~0 so that var = 1 / invstd^2).
    Tensor none_rm, none_rv, lm = save_mean.clone(), li = save_invstd.clone();
    ops::batch_norm_forward(x, Tensor(), Tensor(), Tensor(), none_rm, none_rv, y, lm, li,
                            ops::BatchNormParams{1e-30, 0.0, true, false});
    const std::vector<double> vm = host_values(lm), vi = host_values(li);
    // The global mean from the ranks' sums and counts, then the variance about it from each
    // rank's variance and mean (the parallel-variance formula).
    std::vector<double> buf(static_cast<size_t>(c) + 1);
    for (int64_t i = 0; i < c; ++i) buf[i] = m * vm[i];
    buf[c] = m;
    if (sum) sum(buf.data(), buf.size());
    count = buf[c];
    std::vector<double> mean(c), var(c);
    for (int64_t i = 0; i < c; ++i) {
      mean[i] = buf[i] / count;
      const double d = vm[i] - mean[i];
      var[i] = m * (std::max(1.0 / (vi[i] * vi[i]) - 1e-30, 0.0) + d * d);
    }
    if (sum) sum(var.data(), var.size());
    for (double& v : var) v /= count;
    // y with the global statistics: the eval-mode kernel (which leaves its stats alone).
    Tensor gm = channel_tensor(mean, x), gv = channel_tensor(var, x);
    ops::batch_norm_forward(x, weight, bias, residual, gm, gv, y, save_mean, save_invstd,
                            ops::BatchNormParams{eps, momentum, false, relu});
    // torch's running-statistics update, unbiased with the global count.
    if (running_mean.defined()) {
      std::vector<double> r = host_values(running_mean);
      for (int64_t i = 0; i < c; ++i) r[i] = (1 - momentum) * r[i] + momentum * mean[i];
      Tensor(running_mean).copy_(channel_tensor(r, running_mean));
    }
    if (running_var.defined()) {
      std::vector<double> r = host_values(running_var);
      for (int64_t i = 0; i < c; ++i)
        r[i] = (1 - momentum) * r[i] +
               momentum * (count > 1 ? var[i] * count / (count - 1) : var[i]);
      Tensor(running_var).copy_(channel_tensor(r, running_var));
    }
  }
  if (any_requires_grad({&x_in, &weight, &bias, &residual_in})) {
    auto node = std::make_shared<SyncBatchNormNode>();
    node->x = x;
    node->weight = weight;
    if (relu) node->y = y.detach();
    node->mean = save_mean;
    node->invstd = save_invstd;
    node->count = count;
    node->sum = sum;
    node->relu = relu;
    node->has_weight = weight.defined();
    node->has_bias = bias.defined();
    node->has_residual = residual_in.defined();
    record(node, {&x_in, &weight, &bias, &residual_in}, y);
  }
  trace::add(op_record::batch_norm, {x_in, weight, bias, running_mean, running_var, residual_in}, y,
             {{"training", true}, {"eps", eps}, {op_name::relu, relu}});
  return y;
}

}  // namespace hpcnet
