// Module bookkeeping (names, state_dict, modes) and the basic layers.
#include <cmath>
#include <set>
#include <string>

#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"

namespace hpcnet::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_)
    child->collect(name.empty() ? prefix : prefix + name + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, t] : named_parameters()) out.emplace_back(n, t.detach());
  for (auto& [n, t] : named_buffers()) out.emplace_back(n, t.detach());
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NamedTensors mine = named_parameters();
  for (auto& nb : named_buffers()) mine.push_back(nb);
  // Every mismatch, in the model's order, then the unexpected keys: the first is the message,
  // the next four follow it (fixing one at a time is slow with a checkpoint of another model).
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      if (strict) problems.push_back("state_dict is missing '" + name + "'");
      continue;
    }
    seen.insert(name);
    if (it->second.shape() != t.shape())
      problems.push_back("state_dict entry '" + name + "' has shape " +
                         shape_str(it->second.shape()) + ", the model expects " +
                         shape_str(t.shape()));
  }
  if (strict)
    for (auto& [name, t] : state)
      if (!seen.count(name)) problems.push_back("state_dict has unexpected key '" + name + "'");
  if (!problems.empty()) {
    std::string msg = problems[0];
    if (problems.size() > 1) {
      msg += " (and " + std::to_string(problems.size() - 1) + " more: ";
      for (size_t i = 1; i < problems.size() && i < 5; ++i)
        msg += (i > 1 ? "; " : "") + problems[i];
      msg += problems.size() > 5 ? "; ...)" : ")";
    }
    throw InputError(msg);
  }
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it != state.end()) Tensor(t).copy_(it->second);
  }
}

void Module::to_(Device d) {
  for (auto& [n, p] : named_parameters()) p.to_(d);
  for (auto& [n, b] : named_buffers()) b.to_(d);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, c] : children_)
    for (auto& [sub, m] : c->named_modules()) {
      std::string name = n;
      if (!sub.empty()) name += (name.empty() ? "" : ".") + sub;
      out.emplace_back(name, m);
    }
  return out;
}

void Module::zero_grad(bool set_to_none) { zero_grads(parameters(), set_to_none); }

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

namespace {
Tensor uniform_tensor(const Shape& shape, double bound) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  Rng& rng = default_rng();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(-bound + 2.0 * bound * rng.uniform());
  return t;
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride_,
               int64_t padding_, bool has_bias, int64_t dilation_, int64_t groups_)
    : stride(stride_), padding(padding_), dilation(dilation_), groups(groups_) {
  HPCNET_REQUIRE(
      in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride_ > 0 && padding_ >= 0 &&
          dilation_ > 0,
      "Conv2d: channels, kernel_size, stride and dilation must be positive, padding >= 0");
  HPCNET_REQUIRE(groups_ == 1 || (groups_ == in_channels && groups_ == out_channels),
                 "Conv2d: groups " + std::to_string(groups_) + " with " +
                     std::to_string(in_channels) + " -> " + std::to_string(out_channels) +
                     " channels is not served: only groups 1 and depthwise (groups == "
                     "in_channels == out_channels)");
  const int64_t fan_in = in_channels / groups_ * kernel_size * kernel_size;
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  weight = register_parameter(
      "weight",
      uniform_tensor({out_channels, in_channels / groups_, kernel_size, kernel_size}, bound));
  if (has_bias) bias = register_parameter("bias", uniform_tensor({out_channels}, bound));
}

Tensor Conv2d::forward(const Tensor& x) {
  if (groups != 1) return F::depthwise_conv2d(x, weight, bias, stride, padding, dilation);
  return F::conv2d(x, weight, bias, stride, padding, dilation);
}
Tensor Conv2d::forward_relu(const Tensor& x) {
  if (groups != 1) return F::relu(F::depthwise_conv2d(x, weight, bias, stride, padding, dilation));
  return F::conv2d_relu(x, weight, bias, stride, padding, dilation);
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                 int64_t stride_, int64_t padding_, int64_t output_padding_,
                                 bool has_bias)
    : stride(stride_), padding(padding_), output_padding(output_padding_) {
  HPCNET_REQUIRE(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride_ > 0 &&
                     padding_ >= 0 && output_padding_ >= 0 && output_padding_ < stride_,
                 "ConvTranspose2d: channels, kernel_size and stride must be positive, padding >= "
                 "0 and 0 <= output_padding < stride");
  double bound = 1.0 / std::sqrt(static_cast<double>(out_channels * kernel_size * kernel_size));
  weight = register_parameter(
      "weight", uniform_tensor({in_channels, out_channels, kernel_size, kernel_size}, bound));
  if (has_bias) bias = register_parameter("bias", uniform_tensor({out_channels}, bound));
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return F::conv_transpose2d(x, weight, bias, stride, padding, output_padding);
}

MaxPool2d::MaxPool2d(int64_t kernel_size_, int64_t stride_, int64_t padding_)
    : kernel_size(kernel_size_), stride(stride_ ? stride_ : kernel_size_), padding(padding_) {}
Tensor MaxPool2d::forward(const Tensor& x) {
  return F::max_pool2d(x, kernel_size, stride, padding);
}

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias) {
  HPCNET_REQUIRE(in_features > 0 && out_features > 0, "Linear: features must be positive");
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform_tensor({out_features, in_features}, bound));
  if (has_bias) bias = register_parameter("bias", uniform_tensor({out_features}, bound));
}

Tensor Linear::forward(const Tensor& x) { return F::linear(x, weight, bias); }
Tensor Linear::forward_relu(const Tensor& x) { return F::linear_relu(x, weight, bias); }

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps_, double momentum_)
    : eps(eps_), momentum(momentum_) {
  HPCNET_REQUIRE(num_features > 0, "BatchNorm2d: num_features must be positive");
  HPCNET_REQUIRE(eps_ > 0 && momentum_ >= 0 && momentum_ <= 1,
                 "BatchNorm2d: need eps > 0 and 0 <= momentum <= 1");
  weight = register_parameter("weight", Tensor::full({num_features}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({num_features}));
  running_mean = register_buffer("running_mean", Tensor::zeros({num_features}));
  running_var = register_buffer("running_var", Tensor::full({num_features}, 1.0));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::kInt64));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return forward_act(x, Tensor(), false); }

Tensor BatchNorm2d::forward_act(const Tensor& x, const Tensor& residual, bool relu) {
  HPCNET_REQUIRE(
      x.dim() == 4 && x.size(1) == weight.size(0),
      "BatchNorm2d(" + std::to_string(weight.size(0)) + ") got input " + shape_str(x.shape()));
  if (is_training()) {
    // torch counts the batches; with a fixed momentum the count is informational only.
    if (num_batches_tracked.device().is_cpu())
      ++num_batches_tracked.data<int64_t>()[0];
    else  // on the device: a copy to the host and back would wait for the GPU at every layer
      cuda_increment_int64(num_batches_tracked.raw_data(), num_batches_tracked.device());
  }
  if (is_training() && sync)
    return F::sync_batch_norm_act(x, weight, bias, running_mean, running_var, momentum, eps,
                                  residual, relu, sync);
  return F::batch_norm_act(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                           residual, relu);
}

Dropout::Dropout(double p) : p_(p) {
  HPCNET_REQUIRE(p >= 0 && p <= 1, "Dropout: p must be in [0, 1]");
}

Tensor ModuleDict::forward(const Tensor&) {
  throw InputError("a ModuleDict has no forward; its owner calls its children");
}

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& [n, m] : children()) y = m->forward(y);
  return y;
}

}  // namespace hpcnet::nn
