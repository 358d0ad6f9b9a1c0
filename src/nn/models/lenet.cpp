// The PyTorch CIFAR-10 tutorial's Net, line for line:
//   conv1 = Conv2d(3, 6, 5); pool = MaxPool2d(2, 2); conv2 = Conv2d(6, 16, 5)
//   fc1 = Linear(16 * 5 * 5, 120); fc2 = Linear(120, 84); fc3 = Linear(84, 10)
//   forward: pool(relu(conv1(x))) -> pool(relu(conv2(x))) -> flatten(x, 1)
//            -> relu(fc1(x)) -> relu(fc2(x)) -> fc3(x)
// Each conv/linear + relu pair runs as one fused kernel (same numbers as the separate ops).
#include "src/nn/models/models.h"

namespace hpcnet::nn {

LeNet::LeNet(int64_t num_classes) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 6, 5));
  pool = register_module("pool", std::make_shared<MaxPool2d>(2, 2));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(6, 16, 5));
  fc1 = register_module("fc1", std::make_shared<Linear>(16 * 5 * 5, 120));
  fc2 = register_module("fc2", std::make_shared<Linear>(120, 84));
  fc3 = register_module("fc3", std::make_shared<Linear>(84, num_classes));
}

Tensor LeNet::forward(const Tensor& input) {
  HPCNET_REQUIRE(input.dim() == 4 && input.size(1) == 3 && input.size(2) == 32 &&
                     input.size(3) == 32,
                 "lenet takes (N, 3, 32, 32) images, got " + shape_str(input.shape()));
  Tensor x = pool->forward(conv1->forward_relu(input));  // pool(relu(conv1(x)))
  x = pool->forward(conv2->forward_relu(x));             // pool(relu(conv2(x)))
  x = F::flatten(x, 1);                                  // flatten all dimensions except batch
  x = fc1->forward_relu(x);                              // relu(fc1(x))
  x = fc2->forward_relu(x);                              // relu(fc2(x))
  return fc3->forward(x);                                // fc3(x)
}

}  // namespace hpcnet::nn
