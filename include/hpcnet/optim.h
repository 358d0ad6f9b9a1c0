// Optimizers with torch.optim semantics: SGD and AdamW (each update one fused kernel call over
// all parameters), parameter groups (GroupedOptimizer, Ultralytics' three groups), gradient
// clipping, an exponential moving average of the weights (EMA) and learning-rate schedules
// (LrSchedule).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/nn.h"

namespace hpcnet::optim {

struct SGDOptions {
  double lr = 0.001;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// What the training loop needs of an optimizer: a step over the parameters' gradients, the
// learning rate (set by the schedule every step), and state for checkpoints.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  virtual void zero_grad(bool set_to_none = true) = 0;  // torch 2.x default
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  int64_t steps() const { return steps_; }
  // Named state tensors (names say what they are, ending in the parameter's name) and the step
  // count; load checks names and shapes (InputError).
  virtual nn::NamedTensors state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) = 0;

 protected:
  int64_t steps_ = 0;
};

// torch.optim.SGD. Per parameter and in this order:
//   g = grad + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
class SGD : public Optimizer {
 public:
  // Invalid options (negative lr, momentum or weight decay; nesterov without momentum or with
  // dampening) are an InputError, as torch raises ValueError.
  SGD(nn::NamedTensors params, SGDOptions options);
  void step() override;
  void zero_grad(bool set_to_none = true) override;
  const SGDOptions& options() const { return opt_; }
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override { opt_.lr = lr; }
  void set_momentum(double m) { opt_.momentum = m; }

  // Momentum buffers as "momentum_buffer.<param name>" (present after the first step).
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> param_list_, grads_, momentum_buffers_;
  std::vector<bool> fresh_;  // buffer created this step
  SGDOptions opt_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p -= lr * weight_decay * p
};

// torch.optim.AdamW (amsgrad=False, maximize=False): see ops::AdamWParams for the rule. State:
// "exp_avg.<param>" and "exp_avg_sq.<param>" (zeros until the first step), and the step count.
class AdamW : public Optimizer {
 public:
  // Invalid options are an InputError, as torch raises ValueError.
  AdamW(nn::NamedTensors params, AdamWOptions options);
  void step() override;
  void zero_grad(bool set_to_none = true) override;
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override { opt_.lr = lr; }
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> param_list_, grads_, exp_avg_, exp_avg_sq_;  // torch's state names
  AdamWOptions opt_;
};

// torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: the total norm of all
// gradients (as if concatenated) is returned, and when it exceeds max_norm every gradient is
// scaled by max_norm / (total + 1e-6). Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Parameter groups as torch.optim's param_groups for per-parameter optimizers (SGD, AdamW): each
// group is its own optimizer over its parameters, with its own learning rate and weight decay
// (every update is per parameter, so this is the same arithmetic as one optimizer with groups).
// State names are the groups' own (parameter names are unique across groups).
class GroupedOptimizer : public Optimizer {
 public:
  // One optimizer per group, made by make(params[g], g). Requires at least one group; empty
  // groups are kept (their steps do nothing).
  GroupedOptimizer(
      const std::vector<nn::NamedTensors>& params,
      const std::function<std::unique_ptr<Optimizer>(const nn::NamedTensors&, size_t)>& make);
  void step() override;
  void zero_grad(bool set_to_none = true) override;
  // The learning rate of group 0 (torch's optimizer.param_groups[0]["lr"]); set_lr sets every
  // group's.
  double lr() const override { return groups_.at(0)->lr(); }
  void set_lr(double lr) override;
  size_t num_groups() const { return groups_.size(); }
  Optimizer& group(size_t g) { return *groups_.at(g); }
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  std::vector<std::unique_ptr<Optimizer>> groups_;
  std::vector<std::set<std::string>> names_;  // each group's parameter names
};

// Ultralytics' parameter groups (engine/trainer.py build_optimizer), in its order: 0 the weights
// with decay, 1 the normalisation layers' weights (no decay), 2 the biases (no decay; the group
// its warm-up starts at warmup_bias_lr). A bias is a parameter whose name contains "bias"; a norm
// weight belongs to a module with a running_mean buffer (BatchNorm).
std::array<nn::NamedTensors, 3> ultralytics_param_groups(const nn::Module& model,
                                                         const nn::NamedTensors& trainable);

// An exponential moving average of a model's parameters and floating-point buffers (timm's
// ModelEmaV2): after each optimizer step, ema = decay * ema + (1 - decay) * value; integer buffers
// (num_batches_tracked) are copied. apply_to() swaps the averages into the model (for evaluation
// or saving) and swapping again restores the trained weights.
class EMA {
 public:
  // tau > 0: Ultralytics' ModelEMA ramp, the decay of update n being decay (1 - exp(-n / tau)).
  EMA(const nn::Module& model, double decay, double tau = 0);
  void update(const nn::Module& model);
  // The number of updates made (after a resume: the optimizer steps taken).
  void set_updates(int64_t n) { updates_ = n; }
  void swap(nn::Module& model);
  double decay() const { return decay_; }
  // "ema.<name>" for every entry of the model's state_dict.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  nn::NamedTensors avg_;
  double decay_, tau_;
  int64_t updates_ = 0;
};

}  // namespace hpcnet::optim

namespace hpcnet::optim {

// Learning-rate schedules as pure functions of the step, so a resumed run needs no scheduler
// state. Each matches a torch.optim.lr_scheduler schedule stepped as noted:
//   constant
//   multistep  lr * gamma^(number of milestones <= epoch)            MultiStepLR, per epoch
//   cosine     eta_min + (lr - eta_min)(1 + cos(pi epoch / T)) / 2   CosineAnnealingLR(T = epochs
//                                                                     after warm-up), per epoch
//   onecycle   OneCycleLR(max_lr = lr, total_steps, pct_start, div_factor, final_div_factor,
//              anneal_strategy="cos", three_phase=False), per step
//   linear     Ultralytics' default: lr ((1 - epoch / epochs)(1 - lrf) + lrf), LambdaLR per
//              epoch, with Ultralytics' own warm-up (below) instead of LinearLR
// An optional linear warm-up over warmup_epochs (LinearLR(start_factor, 1.0), per epoch) runs
// first, and the schedule proper then starts at epoch 0 (SequentialLR).
struct LrSchedule {
  std::string kind = "constant";  // constant | multistep | cosine | onecycle
  double lr = 0.001;
  std::vector<int64_t> milestones;  // multistep, in epochs (after warm-up)
  double gamma = 0.1;
  double eta_min = 0.0;
  int64_t warmup_epochs = 0;
  double warmup_start_factor = 0.1;
  double pct_start = 0.3, div_factor = 25.0, final_div_factor = 1e4;  // onecycle
  double lrf = 0.01;             // linear: the final rate as a fraction of lr
  double warmup_bias_lr = 0.1;   // linear warm-up: the biases' starting rate
  double warmup_momentum = 0.8;  // linear warm-up: SGD's starting momentum

  // InputError for an unknown kind or bad values.
  void validate() const;
  // The learning rate for global step `step` (0-based) of a run of `epochs` epochs of
  // `steps_per_epoch` steps.
  double lr_at(int64_t step, int64_t steps_per_epoch, int64_t epochs) const;
  // linear: Ultralytics' (8.4) warm-up over nw = min(warmup_epochs, epochs - 1) x steps_per_epoch
  // steps: at step ni <= nw, a group's rate is interpolated from warmup_bias_lr (the bias group)
  // or 0 to lr lf(epoch), and SGD's momentum from warmup_momentum to momentum. Other kinds:
  // lr_at for every group and the momentum unchanged.
  double group_lr_at(int64_t step, int64_t steps_per_epoch, int64_t epochs, bool bias_group) const;
  double momentum_at(int64_t step, int64_t steps_per_epoch, int64_t epochs, double momentum) const;
  int64_t linear_warmup_steps(int64_t steps_per_epoch, int64_t epochs) const;
  // Ultralytics' (8.4.190) gradient accumulation: the optimizer steps once the batches since its
  // last step reach accumulate. acc0 = min(max(round(nbs / batch), 1), steps_per_epoch x epochs)
  // (batch: the global batch; nbs 0: always 1); during the linear warm-up (step ni <= nw)
  // accumulate = max(1, round(interp(ni, [0, nw], [1, acc0]))) (round half to even, as NumPy's),
  // acc0 from nw on and without a warm-up.
  int64_t accumulate_at(int64_t step, int64_t steps_per_epoch, int64_t epochs, int64_t nbs,
                        int64_t batch) const;
};

}  // namespace hpcnet::optim
