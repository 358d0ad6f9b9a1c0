// Parameter groups: one optimizer per group (see optim.h), and Ultralytics' grouping of a model's
// parameters into biases, decayed weights and normalisation weights.
#include <set>

#include "hpcnet/optim.h"

namespace hpcnet::optim {

GroupedOptimizer::GroupedOptimizer(
    const std::vector<nn::NamedTensors>& params,
    const std::function<std::unique_ptr<Optimizer>(const nn::NamedTensors&, size_t)>& make) {
  HPCNET_REQUIRE(!params.empty(), "GroupedOptimizer needs at least one group");
  for (size_t g = 0; g < params.size(); ++g) {
    groups_.push_back(make(params[g], g));
    std::set<std::string> names;
    for (const auto& [n, t] : params[g]) names.insert(n);
    names_.push_back(std::move(names));
  }
}

void GroupedOptimizer::step() {
  for (auto& g : groups_) g->step();
  ++steps_;
}

void GroupedOptimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_) g->zero_grad(set_to_none);
}

void GroupedOptimizer::set_lr(double lr) {
  for (auto& g : groups_) g->set_lr(lr);
}

nn::NamedTensors GroupedOptimizer::state_dict() const {
  nn::NamedTensors out;
  for (auto& g : groups_)
    for (auto& e : g->state_dict()) out.push_back(e);
  return out;
}

void GroupedOptimizer::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  // Each group gets the entries of its parameters ("<kind>.<parameter name>").
  std::vector<std::map<std::string, Tensor>> parts(groups_.size());
  for (const auto& [key, t] : state) {
    const size_t dot = key.find('.');
    const std::string param = dot == std::string::npos ? key : key.substr(dot + 1);
    size_t g = 0;
    while (g < names_.size() && !names_[g].count(param)) ++g;
    if (g == names_.size()) throw InputError("optimizer state has unexpected key '" + key + "'");
    parts[g].emplace(key, t);
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g]->load_state_dict(parts[g], steps);
  steps_ = steps;
}

std::array<nn::NamedTensors, 3> ultralytics_param_groups(const nn::Module& model,
                                                         const nn::NamedTensors& trainable) {
  std::set<std::string> norm_modules;  // modules with running statistics: BatchNorm
  for (const auto& [name, t] : model.state_dict()) {
    const std::string suffix = "running_mean";
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      norm_modules.insert(name.substr(0, name.size() - suffix.size()));
  }
  std::array<nn::NamedTensors, 3> g;
  for (const auto& [name, t] : trainable) {
    const size_t dot = name.rfind('.');
    const std::string module = dot == std::string::npos ? "" : name.substr(0, dot + 1);
    if (name.find("bias") != std::string::npos)
      g[2].emplace_back(name, t);
    else if (norm_modules.count(module))
      g[1].emplace_back(name, t);
    else
      g[0].emplace_back(name, t);
  }
  return g;
}

}  // namespace hpcnet::optim
