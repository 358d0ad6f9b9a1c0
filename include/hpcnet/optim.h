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
