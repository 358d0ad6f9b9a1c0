// The built-in models. Each is a Module whose parameter names match its PyTorch definition.
#pragma once

#include "hpcnet/nn.h"

namespace hpcnet::nn {

class LeNet : public Module {
 public:
  explicit LeNet(int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<MaxPool2d> pool;
  std::shared_ptr<Linear> fc1, fc2, fc3;
};

}  // namespace hpcnet::nn
