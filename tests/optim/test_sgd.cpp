// Tests of optim::SGD (src/optim/sgd.cpp): its options validated as torch.optim.SGD validates them,
// the torch update rule (momentum, dampening, nesterov, weight decay), a state that round-trips to
// identical steps, zero_grad and set_lr.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- SGD -------------------------------------------------------------------------------------

TEST(NnSgd, InvalidOptionsAreInputErrors) {
  auto m = nn::make_model("lenet");
  auto make = [&](optim::SGDOptions o) { optim::SGD opt(m->named_parameters(), o); };
  optim::SGDOptions o;
  o.lr = -0.1;
  EXPECT_NE(input_error([&] { make(o); }).find("learning rate"), std::string::npos);
  o = {};
  o.lr = std::nan("");
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.momentum = -0.5;
  EXPECT_NE(input_error([&] { make(o); }).find("momentum"), std::string::npos);
  o = {};
  o.weight_decay = -1e-4;
  EXPECT_NE(input_error([&] { make(o); }).find("weight_decay"), std::string::npos);
  o = {};
  o.nesterov = true;  // without momentum
  EXPECT_NE(input_error([&] { make(o); }).find("nesterov"), std::string::npos);
  o = {};
  o.nesterov = true;
  o.momentum = 0.9;
  o.dampening = 0.1;  // with dampening
  EXPECT_THROW(make(o), InputError);
  // Valid ones.
  o = {};
  o.nesterov = true;
  o.momentum = 0.9;
  EXPECT_NO_THROW(make(o));
  o = {};
  o.lr = 0;
  EXPECT_NO_THROW(make(o));
}

// Two steps on a hand-set gradient against torch.optim.SGD's rule, written out.
TEST(NnSgd, StepFollowsTheTorchRule) {
  nn::Linear lin(2, 1);
  Tensor w = lin.weight, b = lin.bias;
  Tensor(w).copy_(Tensor::from_vector({1.f, -2.f}, {1, 2}));
  Tensor(b).copy_(Tensor::from_vector({0.5f}, {1}));
  optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  optim::SGD opt(lin.named_parameters(), o);
  EXPECT_TRUE(opt.state_dict().empty());  // no buffers before the first step

  std::vector<double> p = {1, -2}, buf(2, 0);
  const std::vector<double> g1 = {0.5, 0.25}, g2 = {-1, 2};
  for (int s = 0; s < 2; ++s) {
    const auto& g = s == 0 ? g1 : g2;
    w.set_grad(Tensor::from_vector({static_cast<float>(g[0]), static_cast<float>(g[1])}, {1, 2}));
    b.set_grad(Tensor::zeros({1}));
    opt.step();
    for (int i = 0; i < 2; ++i) {
      double gi = g[i] + 0.01 * p[i];
      buf[i] = s == 0 ? gi : 0.9 * buf[i] + gi;
      p[i] -= 0.1 * buf[i];
    }
    std::vector<float> got = w.to_vector();
    EXPECT_NEAR(got[0], p[0], 1e-6) << "step " << s;
    EXPECT_NEAR(got[1], p[1], 1e-6) << "step " << s;
  }
  EXPECT_EQ(opt.steps(), 2);
  auto sd = opt.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "momentum_buffer.weight");
  EXPECT_EQ(sd[1].first, "momentum_buffer.bias");
  std::vector<float> bv = sd[0].second.to_vector();
  EXPECT_NEAR(bv[0], buf[0], 1e-6);
  EXPECT_NEAR(bv[1], buf[1], 1e-6);
}

TEST(NnSgd, StateRoundTripGivesIdenticalSteps) {
  manual_seed(5);
  auto a = nn::make_model("lenet");
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt_a(a->named_parameters(), o);
  Tensor x = uniform_images(4, 11);
  Tensor y = Tensor::from_labels({1, 2, 3, 4});
  auto step = [&](nn::Module& m, optim::SGD& opt) {
    opt.zero_grad();
    F::cross_entropy(m.forward(x), y).backward();
    opt.step();
  };
  step(*a, opt_a);
  step(*a, opt_a);

  // A second model + optimizer restored from a's state continues exactly as a does.
  manual_seed(6);
  auto b = nn::make_model("lenet");
  optim::SGD opt_b(b->named_parameters(), o);
  b->load_state_dict(cloned_state(*a));
  std::map<std::string, Tensor> ostate;
  for (auto& [n, t] : opt_a.state_dict()) ostate.emplace(n, t.clone());
  EXPECT_EQ(ostate.size(), 10u);
  opt_b.load_state_dict(ostate, opt_a.steps());
  EXPECT_EQ(opt_b.steps(), 2);
  step(*a, opt_a);
  step(*b, opt_b);
  EXPECT_EQ(parameter_values(*a), parameter_values(*b));

  // Bad optimizer state.
  std::map<std::string, Tensor> bad = ostate;
  bad["momentum_buffer.fc1.bias"] = Tensor::zeros({7});
  std::string msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("momentum_buffer.fc1.bias"), std::string::npos) << msg;
  bad = ostate;
  bad.emplace("momentum_buffer.fc9.weight", Tensor::zeros({1}));
  msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("fc9"), std::string::npos) << msg;
}

TEST(NnSgd, ZeroGradAndSetLr) {
  manual_seed(0);
  auto m = nn::make_model("lenet");
  optim::SGD opt(m->named_parameters(), {});
  F::cross_entropy(m->forward(uniform_images(2, 1)), Tensor::from_labels({0, 1})).backward();
  opt.zero_grad(/*set_to_none=*/false);
  for (auto& [n, p] : m->named_parameters())
    for (float g : p.grad().to_vector()) ASSERT_EQ(g, 0.f) << n;
  opt.zero_grad(true);
  for (auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  opt.set_lr(0.5);
  EXPECT_EQ(opt.options().lr, 0.5);
  // lr = 0 (and no decay): a step leaves the parameters as they were.
  auto before = parameter_values(*m);
  optim::SGD frozen(m->named_parameters(), {0.0, 0.9, 0, 0, false});
  F::cross_entropy(m->forward(uniform_images(2, 1)), Tensor::from_labels({0, 1})).backward();
  frozen.step();
  EXPECT_EQ(parameter_values(*m), before);
}
