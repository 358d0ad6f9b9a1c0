// Tests of src/optim/adamw.cpp: optim::EMA (the average, swap and state round trip, refusals),
// optim::AdamW (options, the torch update rule, named state, bit-identical steps after a restore)
// and optim::clip_grad_norm.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

std::map<std::string, Tensor> rs_clone_map(const nn::NamedTensors& ts) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : ts) out.emplace(n, t.clone());
  return out;
}

}  // namespace

// ---- EMA ---------------------------------------------------------------------------------------

namespace {

// conv -> batch norm -> pool -> linear: float parameters, float buffers and an int64 buffer.
std::shared_ptr<nn::Sequential> rs_small_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1))
      .add(std::make_shared<nn::BatchNorm2d>(4))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::GlobalAvgPool2d>())
      .add(std::make_shared<nn::Linear>(4, 2));
  return net;
}

}  // namespace

TEST(ResnetEma, TracksTheAverageSwapsAndRoundTrips) {
  auto net = rs_small_net(1);
  optim::EMA ema(*net, 0.9);
  EXPECT_EQ(ema.decay(), 0.9);
  const auto sd = net->state_dict();
  auto esd = ema.state_dict();
  ASSERT_EQ(esd.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(esd[i].first, "ema." + sd[i].first);
    EXPECT_TRUE(same_bytes(esd[i].second, sd[i].second)) << sd[i].first;
    EXPECT_NE(esd[i].second.raw_data(), sd[i].second.raw_data()) << "a copy, not shared";
  }
  const auto old = values_by_name(sd);

  // New weights (and running statistics, and a batch count) in the model.
  {
    NoGradGuard ng;
    uint64_t s = 100;
    for (auto& [n, p] : net->named_parameters()) Tensor(p).copy_(normal_tensor(p.shape(), s++));
  }
  net->forward(normal_tensor({2, 3, 6, 6}, 9));  // training mode: running stats move, count = 1
  // Not updated yet: the averages are still the old values.
  EXPECT_EQ(values_by_name(ema.state_dict(), "ema."), old);
  const auto fresh = values_by_name(net->state_dict());
  ema.update(*net);
  auto avg = values_by_name(ema.state_dict(), "ema.");
  for (auto& [n, v] : avg) {
    const auto& o = old.at(n);
    const auto& f = fresh.at(n);
    ASSERT_EQ(v.size(), f.size()) << n;
    if (n.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(v, f) << "integer buffers are copied";
      EXPECT_EQ(v[0], 1.0);
      continue;
    }
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_NEAR(v[i], 0.9 * o[i] + 0.1 * f[i], 1e-6 * (1 + std::fabs(f[i])))
          << n << "[" << i << "]";
  }
  // The model itself is untouched by update().
  EXPECT_EQ(values_by_name(net->state_dict()), fresh);

  // swap: averages into the model, trained weights into the EMA; twice restores.
  ema.swap(*net);
  EXPECT_EQ(values_by_name(net->state_dict()), avg);
  EXPECT_EQ(values_by_name(ema.state_dict(), "ema."), fresh);
  ema.swap(*net);
  EXPECT_EQ(values_by_name(net->state_dict()), fresh);
  EXPECT_EQ(values_by_name(ema.state_dict(), "ema."), avg);
  // The model still trains after the swaps (parameters keep requires_grad).
  for (auto& [n, p] : net->named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;

  // state_dict -> load_state_dict round trip into another EMA.
  auto other = rs_small_net(2);
  optim::EMA ema2(*other, 0.5);
  ASSERT_NE(values_by_name(ema2.state_dict(), "ema."), avg);
  const auto saved = rs_clone_map(ema.state_dict());
  ema2.load_state_dict(saved);
  EXPECT_EQ(values_by_name(ema2.state_dict(), "ema."), avg);
  ema2.swap(*other);
  EXPECT_EQ(values_by_name(other->state_dict()), avg);
}

TEST(ResnetEma, BadStateAndDecayAreRefused) {
  auto net = rs_small_net(3);
  optim::EMA ema(*net, 0.99);
  const auto before = values_by_name(ema.state_dict());
  auto state = rs_clone_map(ema.state_dict());
  ASSERT_TRUE(state.count("ema.4.bias"));
  state["ema.4.bias"] = Tensor::zeros({3});
  std::string msg = input_error([&] { ema.load_state_dict(state); });
  EXPECT_NE(msg.find("ema.4.bias"), std::string::npos) << msg;
  EXPECT_EQ(values_by_name(ema.state_dict()), before) << "nothing loaded from a bad state";
  state = rs_clone_map(ema.state_dict());
  state.erase("ema.1.running_var");
  msg = input_error([&] { ema.load_state_dict(state); });
  EXPECT_NE(msg.find("ema.1.running_var"), std::string::npos) << msg;
  EXPECT_EQ(values_by_name(ema.state_dict()), before);

  for (double d : {0.0, 1.0, 1.5, -0.1, std::nan("")})
    EXPECT_THROW(optim::EMA(*net, d), InputError) << d;
}

// ---- AdamW -------------------------------------------------------------------------------------

TEST(ResnetAdamW, InvalidOptionsAreInputErrors) {
  nn::Linear lin(3, 2);
  auto make = [&](optim::AdamWOptions o) { optim::AdamW opt(lin.named_parameters(), o); };
  optim::AdamWOptions o;
  o.lr = -1e-3;
  EXPECT_NE(input_error([&] { make(o); }).find("learning rate"), std::string::npos);
  o = {};
  o.lr = std::nan("");
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.beta1 = 1.0;
  EXPECT_NE(input_error([&] { make(o); }).find("beta"), std::string::npos);
  o = {};
  o.beta2 = 1.5;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.beta1 = -0.1;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.eps = -1e-8;
  EXPECT_THROW(make(o), InputError);
  o = {};
  o.weight_decay = -0.01;
  EXPECT_THROW(make(o), InputError);
  o = {};
  EXPECT_NO_THROW(make(o));
  o.lr = 0;
  o.beta1 = 0;
  EXPECT_NO_THROW(make(o));
}

// Two steps on hand-set gradients against torch.optim.AdamW's rule, written out in double.
TEST(ResnetAdamW, StepFollowsTheTorchRuleAndStateIsNamed) {
  nn::Linear lin(2, 1);
  Tensor w = lin.weight, b = lin.bias;
  Tensor(w).copy_(Tensor::from_vector({1.f, -2.f}, {1, 2}));
  Tensor(b).copy_(Tensor::from_vector({0.5f}, {1}));
  optim::AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.05;
  optim::AdamW opt(lin.named_parameters(), o);
  auto sd = opt.state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.bias", "exp_avg.weight", "exp_avg_sq.bias",
                                             "exp_avg_sq.weight"}));
  for (auto& [n, t] : sd) {
    EXPECT_EQ(t.shape(), n.find("weight") != std::string::npos ? (Shape{1, 2}) : (Shape{1})) << n;
    for (float v : t.to_vector()) EXPECT_EQ(v, 0.f) << n;
  }

  std::vector<double> p = {1, -2}, m(2, 0), v(2, 0);
  const std::vector<std::vector<double>> gs = {{0.5, -0.25}, {-1, 2}};
  for (int s = 0; s < 2; ++s) {
    const auto& g = gs[s];
    w.set_grad(Tensor::from_vector({static_cast<float>(g[0]), static_cast<float>(g[1])}, {1, 2}));
    b.set_grad(Tensor::zeros({1}));
    opt.step();
    const int t = s + 1;
    for (int i = 0; i < 2; ++i) {
      p[i] *= 1 - 0.1 * 0.05;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(0.9, t));
      const double vhat = v[i] / (1 - std::pow(0.999, t));
      p[i] -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    std::vector<float> got = w.to_vector();
    EXPECT_NEAR(got[0], p[0], 1e-6) << "step " << t;
    EXPECT_NEAR(got[1], p[1], 1e-6) << "step " << t;
  }
  EXPECT_EQ(opt.steps(), 2);
  std::map<std::string, Tensor> st;
  for (auto& [n, t] : opt.state_dict()) st.emplace(n, t);
  std::vector<float> ev = st.at("exp_avg.weight").to_vector();
  std::vector<float> sv = st.at("exp_avg_sq.weight").to_vector();
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(ev[i], m[i], 1e-6);
    EXPECT_NEAR(sv[i], v[i], 1e-6);
  }
}

TEST(ResnetAdamW, RestoredStateGivesBitIdenticalSteps) {
  auto a = rs_small_net(10);
  optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.05;
  optim::AdamW opt_a(a->named_parameters(), o);
  Tensor x = normal_tensor({4, 3, 6, 6}, 20);
  Tensor y = Tensor::from_labels({0, 1, 1, 0});
  auto step = [&](nn::Module& m, optim::Optimizer& opt) {
    opt.zero_grad();
    F::cross_entropy(m.forward(x), y).backward();
    opt.step();
  };
  step(*a, opt_a);
  step(*a, opt_a);
  const auto mstate = rs_clone_map(a->state_dict());
  const auto ostate = rs_clone_map(opt_a.state_dict());
  EXPECT_EQ(ostate.size(), 2 * a->named_parameters().size());
  for (auto& [n, t] : ostate)
    EXPECT_TRUE(n.rfind("exp_avg.", 0) == 0 || n.rfind("exp_avg_sq.", 0) == 0) << n;

  auto b = rs_small_net(11);
  optim::AdamW opt_b(b->named_parameters(), o);
  b->load_state_dict(mstate);
  opt_b.load_state_dict(ostate, opt_a.steps());
  EXPECT_EQ(opt_b.steps(), 2);
  step(*a, opt_a);
  step(*b, opt_b);
  auto pa = a->state_dict(), pb = b->state_dict();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bytes(pa[i].second, pb[i].second)) << pa[i].first << " differs";

  // Negative control: the same moments with a wrong step count (bias correction) differ.
  auto c = rs_small_net(12);
  optim::AdamW opt_c(c->named_parameters(), o);
  c->load_state_dict(mstate);
  opt_c.load_state_dict(ostate, 0);
  step(*c, opt_c);
  EXPECT_FALSE(same_bytes(a->named_parameters()[0].second, c->named_parameters()[0].second));

  // Bad state.
  auto bad = ostate;
  bad["exp_avg.4.weight"] = Tensor::zeros({3, 3});
  std::string msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("exp_avg.4.weight"), std::string::npos) << msg;
  bad = ostate;
  bad.erase("exp_avg_sq.0.bias");
  msg = input_error([&] { opt_b.load_state_dict(bad, 3); });
  EXPECT_NE(msg.find("exp_avg_sq.0.bias"), std::string::npos) << msg;
  bad = ostate;
  bad.emplace("momentum_buffer.0.weight", Tensor::zeros({4, 3, 3, 3}));
  EXPECT_THROW(opt_b.load_state_dict(bad, 3), InputError);
}

// ---- clip_grad_norm ----------------------------------------------------------------------------

TEST(ResnetClipGradNorm, ReturnsTheTotalNormAndScalesOnlyAboveTheLimit) {
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({1, 1}), none = Tensor::zeros({3});
  for (Tensor* t : {&a, &b, &none}) t->set_requires_grad(true);
  auto set = [&] {
    a.set_grad(Tensor::from_vector({3.f, 4.f}, {2}));
    b.set_grad(Tensor::from_vector({-12.f}, {1, 1}));
  };
  const std::vector<Tensor> params = {a, none, b};
  set();
  EXPECT_NEAR(optim::clip_grad_norm(params, 26.0), 13.0, 1e-9);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3.f, 4.f}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{-12.f}));
  EXPECT_FALSE(none.grad().defined());

  set();
  EXPECT_NEAR(optim::clip_grad_norm(params, 6.5), 13.0, 1e-9);  // the norm before clipping
  std::vector<float> ga = a.grad().to_vector(), gb = b.grad().to_vector();
  EXPECT_NEAR(ga[0], 1.5, 1.5e-6);
  EXPECT_NEAR(ga[1], 2.0, 2e-6);
  EXPECT_NEAR(gb[0], -6.0, 6e-6);
  EXPECT_FALSE(none.grad().defined());
  // Clipped gradients now have norm 6.5 (less 1e-6 / 2): a larger limit leaves them alone.
  EXPECT_NEAR(optim::clip_grad_norm(params, 7.0), 6.5, 1e-5);
  EXPECT_EQ(a.grad().to_vector(), ga);
  EXPECT_EQ(b.grad().to_vector(), gb);

  // Only parameters without gradients: norm 0, nothing happens.
  EXPECT_EQ(optim::clip_grad_norm({none}, 1.0), 0.0);
  EXPECT_THROW(optim::clip_grad_norm(params, 0.0), InputError);
}
