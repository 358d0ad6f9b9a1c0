// SGD: validation, state and the call into the fused kernel (src/ops/sgd/cpu.cpp).
#include <algorithm>
#include <cmath>

#include "hpcnet/optim.h"
#include "src/ops/ops.h"

namespace hpcnet::optim {

SGD::SGD(nn::NamedTensors params, SGDOptions o) : params_(std::move(params)), opt_(o) {
  HPCNET_REQUIRE(std::isfinite(o.lr) && o.lr >= 0,
                 "invalid learning rate " + std::to_string(o.lr) + " (must be >= 0)");
  HPCNET_REQUIRE(o.momentum >= 0, "invalid momentum " + std::to_string(o.momentum));
  HPCNET_REQUIRE(o.weight_decay >= 0, "invalid weight_decay " + std::to_string(o.weight_decay));
  HPCNET_REQUIRE(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                 "nesterov momentum requires a momentum and zero dampening");
  for (auto& [n, p] : params_) param_list_.push_back(p);
  grads_.resize(params_.size());
  momentum_buffers_.resize(params_.size());
  fresh_.assign(params_.size(), false);
}

void SGD::step() {
  NoGradGuard no_grad;
  // Parameters whose momentum buffer starts now (torch: buf = clone(g) on a parameter's first
  // update) go through the kernel in a separate call from the rest.
  bool any_new = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    grads_[i] = param_list_[i].grad();
    if (opt_.momentum != 0 && grads_[i].defined() && !momentum_buffers_[i].defined()) {
      momentum_buffers_[i] = Tensor::empty(param_list_[i].shape(), param_list_[i].dtype(),
                               param_list_[i].device());
      fresh_[i] = true;
      any_new = true;
    }
  }
  ops::SgdParams p{opt_.lr, opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, false};
  if (!any_new) {
    ops::sgd_step(param_list_, grads_, momentum_buffers_, p);
  } else {
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<Tensor> ps, gs, bs;
      for (size_t i = 0; i < params_.size(); ++i) {
        if (fresh_[i] != (pass == 1)) continue;
        ps.push_back(param_list_[i]);
        gs.push_back(grads_[i]);
        bs.push_back(momentum_buffers_[i]);
      }
      p.first_step = pass == 1;
      ops::sgd_step(ps, gs, bs, p);
    }
    std::fill(fresh_.begin(), fresh_.end(), false);
  }
  for (auto& g : grads_) g = Tensor();
  ++steps_;
}

void SGD::zero_grad(bool set_to_none) { zero_grads(param_list_, set_to_none); }

nn::NamedTensors SGD::state_dict() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined()) out.emplace_back("momentum_buffer." + params_[i].first, momentum_buffers_[i]);
  return out;
}

void SGD::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  for (auto& [name, t] : state) {
    bool found = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (name != "momentum_buffer." + params_[i].first) continue;
      if (t.shape() != param_list_[i].shape())
        throw InputError("optimizer state '" + name + "' has shape " + shape_str(t.shape()) +
                         ", the parameter has " + shape_str(param_list_[i].shape()));
      found = true;
    }
    if (!found) throw InputError("optimizer state has unexpected key '" + name + "'");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = state.find("momentum_buffer." + params_[i].first);
    if (it == state.end()) {
      momentum_buffers_[i] = Tensor();
    } else {
      momentum_buffers_[i] = Tensor::empty(param_list_[i].shape(), param_list_[i].dtype(),
                               param_list_[i].device());
      momentum_buffers_[i].copy_(it->second);
    }
  }
  steps_ = steps;
}

}  // namespace hpcnet::optim
