// batch_norm: dispatching kernels and F::batch_norm / F::batch_norm_act. The fused form computes
// relu(batch_norm(x) + residual) in one pass (the tail of a ResNet block); its backward first
// masks the gradient with the saved output (relu), which is also the residual's gradient, then
// runs the batch-norm backward:
//   training: dx = w invstd (g - mean(g) - xhat mean(g xhat)),  eval: dx = w invstd g,
//   dweight = sum(g xhat),  dbias = sum(g)   (sums and means over N, H, W per channel).
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_table.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace ops {

HPCNET_DEFINE_OP(batch_norm)

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, Tensor& running_mean, Tensor& running_var,
                        Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                        const BatchNormParams& p) {
  detail::check_same_device_dense("batch_norm", x.device(),
                                  {&x, &weight, &bias, &residual, &running_mean, &running_var,
                                   &y, &save_mean, &save_invstd});
  // No channels: nothing to normalise, every output is empty (CUDA launches a block per channel,
  // and a launch of 0 blocks is an error).
  if (x.size(1) == 0) return;
  HPCNET_DISPATCH_FLOPS(4.0 * x.numel(), x.device(), batch_norm_forward, x, weight, bias,
                        residual, running_mean, running_var, y, save_mean, save_invstd, p);
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                         const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                         Tensor& dweight, Tensor& dbias, const BatchNormParams& p) {
  detail::check_same_device_dense("batch_norm_backward", x.device(),
                                  {&g, &x, &weight, &save_mean, &save_invstd, &dx, &dweight,
                                   &dbias});
  if (x.size(1) == 0) return;  // no channels: every gradient is empty
  HPCNET_DISPATCH_FLOPS(6.0 * x.numel(), x.device(), batch_norm_backward, g, x, weight,
                        save_mean, save_invstd, dx, dweight, dbias, p);
}

}  // namespace ops

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
  ops::detail::check_dtype("batch_norm", t, dtype, what);
}
}  // namespace

Tensor F::batch_norm_act(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training,
                         double momentum, double eps, const Tensor& residual_in, bool relu) {
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
  trace::add("batch_norm", {x_in, weight, bias, running_mean, running_var, residual_in}, y,
             {{"training", training}, {"eps", eps}, {"relu", relu}});
  return y;
}

Tensor F::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool training,
                     double momentum, double eps) {
  return batch_norm_act(x, weight, bias, running_mean, running_var, training, momentum, eps,
                        Tensor(), false);
}

}  // namespace hpcnet
