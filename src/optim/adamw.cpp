// AdamW, gradient clipping and the EMA of weights (see include/hpcnet/optim.h); the arithmetic is
// in the fused kernels (src/ops/adamw/cpu.cpp, src/ops/adamw/cuda.cu).
#include <cmath>

#include "hpcnet/optim.h"
#include "src/ops/ops.h"

namespace hpcnet::optim {

AdamW::AdamW(nn::NamedTensors params, AdamWOptions o) : params_(std::move(params)), opt_(o) {
  HPCNET_REQUIRE(std::isfinite(o.lr) && o.lr >= 0,
                 "invalid learning rate " + std::to_string(o.lr) + " (must be >= 0)");
  HPCNET_REQUIRE(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
                 "invalid AdamW betas (each must be in [0, 1))");
  HPCNET_REQUIRE(o.eps >= 0, "invalid AdamW eps " + std::to_string(o.eps));
  HPCNET_REQUIRE(o.weight_decay >= 0, "invalid weight_decay " + std::to_string(o.weight_decay));
  for (auto& [n, p] : params_) {
    param_list_.push_back(p);
    exp_avg_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    exp_avg_sq_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
  }
  grads_.resize(params_.size());
}

void AdamW::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) grads_[i] = param_list_[i].grad();
  ++steps_;
  ops::AdamWParams p{opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, steps_};
  ops::adamw_step(param_list_, grads_, exp_avg_, exp_avg_sq_, p);
  for (auto& g : grads_) g = Tensor();
}

void AdamW::zero_grad(bool set_to_none) { zero_grads(param_list_, set_to_none); }

nn::NamedTensors AdamW::state_dict() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  std::map<std::string, Tensor*> slots;
  for (size_t i = 0; i < params_.size(); ++i) {
    slots["exp_avg." + params_[i].first] = &exp_avg_[i];
    slots["exp_avg_sq." + params_[i].first] = &exp_avg_sq_[i];
  }
  for (auto& [name, t] : state) {
    auto it = slots.find(name);
    if (it == slots.end()) throw InputError("optimizer state has unexpected key '" + name + "'");
    if (t.shape() != it->second->shape())
      throw InputError("optimizer state '" + name + "' has shape " + shape_str(t.shape()) +
                       ", the parameter has " + shape_str(it->second->shape()));
  }
  for (auto& [name, slot] : slots) {
    auto it = state.find(name);
    if (it == state.end()) throw InputError("optimizer state is missing '" + name + "'");
    slot->copy_(it->second);
  }
  steps_ = steps;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  HPCNET_REQUIRE(max_norm > 0, "gradient clipping needs max_norm > 0");
  NoGradGuard no_grad;
  // Every parameter's sum of squares queued first, then read (on a GPU: one wait, not one per
  // parameter), and added in parameter order.
  std::vector<Tensor> sums;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    sums.push_back(Tensor::empty({}, DType::kFloat64, g.device()));
    ops::sum_squares(g, sums.back());
  }
  double total = 0;
  for (const Tensor& out : sums)
    total += out.to(cpu_device()).data<double>()[0];
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) ops::scale(g, coef, g);
    }
  }
  return total;
}

EMA::EMA(const nn::Module& model, double decay, double tau) : decay_(decay), tau_(tau) {
  HPCNET_REQUIRE(decay > 0 && decay < 1, "EMA decay must be in (0, 1), e.g. 0.999");
  HPCNET_REQUIRE(tau >= 0, "EMA tau must be >= 0");
  for (auto& [n, t] : model.state_dict()) avg_.emplace_back(n, t.clone());
}

void EMA::update(const nn::Module& model) {
  NoGradGuard no_grad;
  auto cur = model.state_dict();
  HPCNET_CHECK(cur.size() == avg_.size(), "EMA: the model's state changed shape");
  ++updates_;
  const double d =
      tau_ > 0 ? decay_ * (1 - std::exp(-static_cast<double>(updates_) / tau_)) : decay_;
  for (size_t i = 0; i < cur.size(); ++i) {
    Tensor& a = avg_[i].second;
    if (a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64)
      ops::lerp_inplace(a, cur[i].second, 1.0 - d);
    else
      a.copy_(cur[i].second);
  }
}

void EMA::swap(nn::Module& model) {
  NoGradGuard no_grad;
  auto cur = model.state_dict();
  HPCNET_CHECK(cur.size() == avg_.size(), "EMA: the model's state changed shape");
  for (size_t i = 0; i < cur.size(); ++i) {
    Tensor tmp = cur[i].second.clone();
    Tensor(cur[i].second).copy_(avg_[i].second);
    avg_[i].second.copy_(tmp);
  }
}

nn::NamedTensors EMA::state_dict() const {
  nn::NamedTensors out;
  for (auto& [n, t] : avg_) out.emplace_back("ema." + n, t);
  return out;
}

void EMA::load_state_dict(const std::map<std::string, Tensor>& state) {
  for (auto& [n, t] : avg_) {
    auto it = state.find("ema." + n);
    if (it == state.end()) throw InputError("EMA state is missing 'ema." + n + "'");
    if (it->second.shape() != t.shape())
      throw InputError("EMA state 'ema." + n + "' has shape " + shape_str(it->second.shape()) +
                       ", the model has " + shape_str(t.shape()));
  }
  for (auto& [n, t] : avg_) t.copy_(state.at("ema." + n));
}

}  // namespace hpcnet::optim
