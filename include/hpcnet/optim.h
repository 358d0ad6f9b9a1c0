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

class SGD {
 public:
  // Invalid options (negative lr, momentum or weight decay; nesterov without momentum or with
  // dampening) are an InputError, as torch raises ValueError.
  SGD(nn::NamedTensors params, SGDOptions options);
  void step();
  void zero_grad(bool set_to_none = true);  // torch 2.x default
  const SGDOptions& options() const { return opt_; }
  void set_lr(double lr) { opt_.lr = lr; }
  int64_t steps() const { return steps_; }

  // Momentum buffers as "momentum_buffer.<param name>" (present after the first step), plus the
  // step count; load checks names and shapes.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps);

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> param_list_, grads_, bufs_;
  std::vector<bool> fresh_;  // buffer created this step
  SGDOptions opt_;
  int64_t steps_ = 0;
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
