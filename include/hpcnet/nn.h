// Modules as in torch.nn: named parameters and submodules (dotted names like "conv1.weight"),
// train/eval mode, state_dict, and the layers Conv2d, ConvTranspose2d, MaxPool2d, Linear, ReLU,
// Flatten, BatchNorm2d, Dropout, GlobalAvgPool2d, Sequential and ModuleDict with PyTorch's default
// initialisation. A module may return several outputs (forward_all); a Trunk returns feature maps
// at several strides for separate heads. Models are built by name with make_model(name,
// ModelOptions), from the registry in src/nn/models/registry.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/tensor.h"

namespace hpcnet::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// What a model returns: one tensor for a classifier (logits), several for detection heads (one
// per stride) or a segmentation model with an auxiliary head.
using Outputs = std::vector<Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // Every output of the model; {forward(x)} unless a model has several.
  virtual Outputs forward_all(const Tensor& x) { return {forward(x)}; }
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Parameters of this module and its children, depth-first in registration order.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Persistent buffers (e.g. batch-norm statistics), same naming.
  NamedTensors named_buffers() const;
  // Parameters then buffers, each detached (sharing storage), in registration order.
  NamedTensors state_dict() const;
  // Copies values in (converting dtypes, as torch does). Missing or unexpected keys (strict) and
  // shape mismatches are an InputError naming the key; nothing is modified unless every key fits.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // Moves every parameter and buffer to d in place (handles held elsewhere follow).
  void to_(Device d);

  void train(bool on = true);
  void eval() { train(false); }
  // This module ("") and every descendant, depth-first, under their dotted names (torch's
  // named_modules): e.g. to switch only the Dropouts to eval mode.
  std::vector<std::pair<std::string, Module*>> named_modules();
  bool is_training() const { return training_; }
  // Drops every parameter's gradient (set_to_none, as torch 2.x) or fills it with zeros.
  void zero_grad(bool set_to_none = true);  // torch 2.x default
  int64_t num_parameters() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  // A child named "" is inlined: its parameters and buffers take no prefix ("conv1.weight", not
  // ".conv1.weight"), so a trunk can be a module of its own under PyTorch's flat names.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

 private:
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// torch.nn.Conv2d(in, out, kernel_size, stride, padding, bias, dilation, groups): weight (out,
// in / groups, k, k), bias (out,) initialised uniform in +-1/sqrt(in / groups * k * k)
// (kaiming_uniform with a = sqrt(5)). groups is 1 or depthwise (groups == in == out, which runs
// F::depthwise_conv2d); another groups is an InputError at construction.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, int64_t dilation = 1, int64_t groups = 1);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x);  // relu(forward(x)) in one fused kernel
  Tensor weight, bias;
  int64_t stride, padding, dilation, groups;
};

// torch.nn.ConvTranspose2d(in, out, kernel_size, stride, padding, output_padding, bias):
// weight (in, out, k, k) and bias (out,) initialised uniform in +-1/sqrt(out * k * k) (torch's
// fan-in of a transposed convolution is weight.size(1) * k * k).
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                  bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t stride, padding, output_padding;
};

// torch.nn.MaxPool2d(kernel_size, stride, padding); stride 0 means kernel_size (torch's None).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  int64_t kernel_size, stride, padding;
};

// torch.nn.Linear(in, out, bias): weight (out, in), bias (out,), uniform in +-1/sqrt(in).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x);
  Tensor weight, bias;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::relu(x); }
};

// torch.nn.GELU(approximate="none" or "tanh").
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return F::gelu(x, approximate); }
  std::string approximate;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override { return F::flatten(x, start_dim_); }

 private:
  int64_t start_dim_;
};

// torch.nn.BatchNorm2d(num_features, eps, momentum): weight (ones), bias (zeros), buffers
// running_mean (zeros), running_var (ones), num_batches_tracked (int64 0-d). Training mode
// normalises with the batch's statistics and updates the running ones; eval mode uses them.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  // relu(bn(x) + residual) in one kernel (residual may be undefined).
  Tensor forward_act(const Tensor& x, const Tensor& residual, bool relu);
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double eps, momentum;
  // Set (data-parallel runs with --sync-bn): training uses the statistics of every rank's batch
  // together, summed by this function (torch.nn.SyncBatchNorm); empty: this rank's batch alone.
  F::RankSum sync;
};

// torch.nn.Dropout(p): identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return F::dropout(x, p_, is_training()); }

 private:
  double p_;
};

// (N, C, H, W) -> (N, C): torch.nn.AdaptiveAvgPool2d(1) followed by flatten.
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::global_avg_pool2d(x); }
};

// Children named "0", "1", ... as in torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
};

// A named holder of submodules (torch.nn.ModuleDict / ModuleList: children named as given, "0",
// "1", ... for a list), for models whose parameter names nest (decoder.blocks.0.conv1.0.weight).
// It has no forward of its own (an InputError if called); its owner calls the children.
class ModuleDict : public Module {
 public:
  template <class M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
  Tensor forward(const Tensor& x) override;
};

// A feature extractor: forward_features returns one feature map per stage, (N, channels[k],
// H / strides[k], W / strides[k]); forward returns the last. Heads (a classifier, detection or
// segmentation heads) are separate modules fed by these maps.
class Trunk : public Module {
 public:
  virtual Outputs forward_features(const Tensor& x) = 0;
  Tensor forward(const Tensor& x) override { return forward_features(x).back(); }
  virtual std::vector<int64_t> feature_strides() const = 0;
  virtual std::vector<int64_t> feature_channels() const = 0;
};

// What make_model needs besides the name: the class count, and what heads need.
struct ModelOptions {
  int64_t num_classes = 10;
  bool aux_loss = false;  // deeplabv3_*: build the auxiliary FCN head (torchvision's aux_loss)
  // resnet18/34/50/101: the last BatchNorm of every residual block starts at weight 0
  // (torchvision's zero_init_residual).
  bool zero_init_residual = false;
};

// What a model is for, from the registry: the task it serves and its default input size.
struct ModelInfo {
  std::string name;
  std::string task;           // "classify", ...
  int64_t imgsz = 32;         // default square input size (the recipe's --imgsz overrides it)
  bool fixed_size = false;    // true when the model takes only imgsz x imgsz inputs (lenet)
  int64_t size_multiple = 1;  // input sides must be multiples of this (unet: 32)
  // The classifier's module ("fc", "linear"): replaced and re-initialised when --weights
  // fine-tunes to another class count. Empty: the model has none that can be replaced.
  std::string classifier = "";
  // The evaluation transform (ModelMeta::eval_policy) of a file of this model without hpcnet's
  // metadata: "imagenet" for torchvision's ImageNet classifiers, whose class names are then
  // 0..K-1 (K from the classifier); "" keeps hpcnet's defaults (CIFAR-10's names, Resize).
  std::string unnamed_eval_policy = "";
};

// The model registered under name (model_names() lists them: the tutorial's "lenet", the CIFAR
// ResNets, U-Nets, YOLOv8 and DeepLabV3), its parameters named as in its PyTorch definition. An
// unknown name is an InputError listing the known ones; num_classes must be >= 1.
std::shared_ptr<Module> make_model(const std::string& name, const ModelOptions& options);
inline std::shared_ptr<Module> make_model(const std::string& name, int64_t num_classes = 10) {
  return make_model(name, ModelOptions{num_classes});
}
std::vector<std::string> model_names();
// The registry's entry for name (InputError listing the known names when there is none).
const ModelInfo& model_info(const std::string& name);

}  // namespace hpcnet::nn
