// The ten SGD steps of tests/golden/lenet_golden.safetensors (make_golden.py) for each of its
// three optimizer runs (sgd; sgd_wd: dampening 0.1, weight decay 5e-4; sgd_nesterov): the loss of
// every step within loss_tol of PyTorch's and every weight afterwards within weight_tol. The CPU
// golden test and the CUDA one run it, each with its own model and tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "src/ops/op_cases.h"

namespace hpcnet::test_util {

inline void check_lenet_sgd_steps(const SafetensorsFile& g,
                                  const std::function<std::shared_ptr<nn::Module>()>& make_model,
                                  Device device, double loss_tol, double weight_tol) {
  Tensor inputs = g.at("step_inputs").to(DType::kFloat32);  // stored as float16 (exact)
  Tensor labels = g.at("step_labels");
  struct Run {
    std::string name;
    optim::SGDOptions opt;
  };
  const std::vector<Run> runs = {{"sgd", {0.01, 0.9, 0, 0, false}},
                                 {"sgd_wd", {0.01, 0.9, 0.1, 5e-4, false}},
                                 {"sgd_nesterov", {0.01, 0.9, 0, 1e-3, true}}};
  for (const Run& run : runs) {
    auto model = make_model();
    optim::SGD opt(model->named_parameters(), run.opt);
    std::vector<double> want_losses = g.at(run.name + "_losses").to_vector_f64();
    for (int64_t s = 0; s < 10; ++s) {
      Tensor x = Tensor::empty({2, 3, 32, 32});
      std::memcpy(x.data<float>(), inputs.data<float>() + s * 2 * 3 * 32 * 32, x.nbytes());
      Tensor y =
          Tensor::from_labels({labels.data<int64_t>()[2 * s], labels.data<int64_t>()[2 * s + 1]});
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model->forward(x.to(device)), y.to(device));
      EXPECT_NEAR(loss.item(), want_losses[s], loss_tol) << run.name << " step " << s;
      loss.backward();
      opt.step();
    }
    for (auto& [name, p] : model->named_parameters()) {
      ASSERT_EQ(p.device().is_cuda(), device.is_cuda()) << name;
      ops::case_checks::expect_near_all(p, g.at(run.name + "." + name), weight_tol, 0,
                                        run.name + "." + name);
    }
  }
}

}  // namespace hpcnet::test_util
