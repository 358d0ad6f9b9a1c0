// A program outside the hpcnet tree, built against an installed hpcnet (find_package or
// pkg-config; see scripts/check-install.sh): the tutorial LeNet from the public API, seeded, one
// forward pass on a (2, 3, 32, 32) batch of 0.5s. Prints the logits' shape and sum.
#include <cstdio>

#include "hpcnet/nn.h"
#include "hpcnet/rng.h"

int main() {
  hpcnet::manual_seed(0);
  std::shared_ptr<hpcnet::nn::Module> net = hpcnet::nn::make_model("lenet");
  net->eval();
  const hpcnet::Tensor x = hpcnet::Tensor::full({2, 3, 32, 32}, 0.5);
  const hpcnet::Tensor y = net->forward(x);  // (2, 10) logits
  std::printf("lenet logits %s sum %.6f\n", hpcnet::shape_str(y.shape()).c_str(),
              hpcnet::F::sum(y).item());
  return 0;
}
