// Optimizers with torch.optim semantics. SGD applies, per parameter and in this order:
//   g = grad + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// The whole update is one fused kernel call over all parameters.
#pragma once

#include <map>
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

  // Momentum buffers as "momentum_buffer.<param name>" (present after the first step).
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> param_list_, grads_, bufs_;
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
  std::vector<Tensor> param_list_, grads_, m_, v_;
  AdamWOptions opt_;
};

// torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: the total norm of all
// gradients (as if concatenated) is returned, and when it exceeds max_norm every gradient is
// scaled by max_norm / (total + 1e-6). Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// An exponential moving average of a model's parameters and floating-point buffers (timm's
// ModelEmaV2): after each optimizer step, ema = decay * ema + (1 - decay) * value; integer buffers
// (num_batches_tracked) are copied. apply_to() swaps the averages into the model (for evaluation
// or saving) and swapping again restores the trained weights.
class EMA {
 public:
  EMA(const nn::Module& model, double decay);
  void update(const nn::Module& model);
  void swap(nn::Module& model);
  double decay() const { return decay_; }
  // "ema.<name>" for every entry of the model's state_dict.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  nn::NamedTensors avg_;
  double decay_;
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

  // InputError for an unknown kind or bad values.
  void validate() const;
  // The learning rate for global step `step` (0-based) of a run of `epochs` epochs of
  // `steps_per_epoch` steps.
  double lr_at(int64_t step, int64_t steps_per_epoch, int64_t epochs) const;
};

}  // namespace hpcnet::optim
