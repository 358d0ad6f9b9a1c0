// Tests of src/nn and src/optim: LeNet's parameters carry PyTorch's names, shapes, order and count;
// initialisation follows PyTorch's bounds and is reproducible under manual_seed; state_dict round
// trips and refuses bad input without modifying the model; train/eval and zero_grad reach every
// submodule; SGD validates its options as torch.optim.SGD does and keeps a loadable state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "src/nn/models/models.h"
#include "test_util.h"

using namespace hpcnet;
using hpcnet::test_util::input_error;

namespace {

// Every value of every parameter, by name (a deep copy).
std::map<std::string, std::vector<float>> nn_snapshot(const nn::Module& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, t] : m.named_parameters()) out[n] = t.to_vector();
  return out;
}

std::map<std::string, Tensor> nn_state_map(const nn::Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : m.state_dict()) out.emplace(n, t.clone());
  return out;
}

// An input batch with values in [-1, 1), like the tutorial's normalised images.
Tensor nn_input(int64_t n, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<float> v(static_cast<size_t>(n * 3 * 32 * 32));
  for (float& x : v) x = rng.uniform(-1.f, 1.f);
  return Tensor::from_vector(v, {n, 3, 32, 32});
}

}  // namespace

// ---- LeNet: PyTorch's names, shapes, order, count -----------------------------------------------

TEST(NnLeNet, ParameterNamesShapesAndOrderMatchPyTorch) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  // The order of the tutorial Net's named_parameters() / state_dict().
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1.weight", {6, 3, 5, 5}},  {"conv1.bias", {6}},
      {"conv2.weight", {16, 6, 5, 5}}, {"conv2.bias", {16}},
      {"fc1.weight", {120, 400}},      {"fc1.bias", {120}},
      {"fc2.weight", {84, 120}},       {"fc2.bias", {84}},
      {"fc3.weight", {10, 84}},        {"fc3.bias", {10}}};
  auto params = model->named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].first, expected[i].first) << "position " << i;
    EXPECT_EQ(params[i].second.shape(), expected[i].second) << params[i].first;
    EXPECT_EQ(params[i].second.dtype(), DType::kFloat32) << params[i].first;
    EXPECT_TRUE(params[i].second.requires_grad()) << params[i].first;
    EXPECT_TRUE(params[i].second.is_contiguous()) << params[i].first;
  }
  // The pool has no parameters and LeNet no buffers: state_dict is the parameter list.
  EXPECT_TRUE(model->named_buffers().empty());
  auto sd = model->state_dict();
  ASSERT_EQ(sd.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(sd[i].first, expected[i].first);
  EXPECT_EQ(model->num_parameters(), 62006);  // sum(p.numel() for p in net.parameters())
  EXPECT_EQ(model->parameters().size(), expected.size());
}

TEST(NnLeNet, NumClassesSetsTheLastLayer) {
  auto model = nn::make_model("lenet", 3);
  auto params = model->named_parameters();
  EXPECT_EQ(params[8].first, "fc3.weight");
  EXPECT_EQ(params[8].second.shape(), (Shape{3, 84}));
  EXPECT_EQ(params[9].second.shape(), (Shape{3}));
  EXPECT_EQ(model->num_parameters(), 62006 - 7 * 85);
  Tensor y = model->forward(nn_input(2, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
}

TEST(NnLeNet, ForwardShapeAndInputCheck) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  Tensor y = (*model)(nn_input(5, 2));
  EXPECT_EQ(y.shape(), (Shape{5, 10}));
  for (float v : y.to_vector()) EXPECT_TRUE(std::isfinite(v));
  std::string msg = input_error([&] { model->forward(Tensor::zeros({1, 3, 28, 28})); });
  EXPECT_NE(msg.find("(1, 3, 28, 28)"), std::string::npos) << msg;
  msg = input_error([&] { model->forward(Tensor::zeros({1, 1, 32, 32})); });
  EXPECT_NE(msg.find("lenet"), std::string::npos) << msg;
}

TEST(NnLeNet, MakeModelRejectsUnknownNames) {
  std::string msg = input_error([] { nn::make_model("resnet999"); });
  EXPECT_NE(msg.find("resnet999"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lenet"), std::string::npos) << msg;  // lists the known ones
  msg = input_error([] { nn::make_model("lenet", 0); });
  EXPECT_NE(msg.find("classes"), std::string::npos) << msg;
  auto names = nn::model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "lenet"), names.end());
}

// ---- initialisation --------------------------------------------------------------------------

// torch: kaiming_uniform_(a=sqrt(5)) for weights and uniform(+-1/sqrt(fan_in)) for biases, i.e.
// every value of a layer uniform in +-1/sqrt(fan_in).
TEST(NnLeNet, InitIsUniformWithinPyTorchBounds) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  const std::map<std::string, double> fan_in = {
      {"conv1", 3 * 25}, {"conv2", 6 * 25}, {"fc1", 400}, {"fc2", 120}, {"fc3", 84}};
  for (auto& [name, t] : model->named_parameters()) {
    std::string layer = name.substr(0, name.find('.'));
    double bound = 1.0 / std::sqrt(fan_in.at(layer));
    std::vector<float> v = t.to_vector();
    double maxabs = 0, sum = 0, sumsq = 0;
    for (float x : v) {
      maxabs = std::max(maxabs, std::fabs(static_cast<double>(x)));
      sum += x;
      sumsq += static_cast<double>(x) * x;
    }
    EXPECT_LE(maxabs, bound) << name;
    const double n = static_cast<double>(v.size());
    if (n >= 400) {
      // Uniform(-b, b): max |w| close to b, mean ~ 0, variance b^2 / 3.
      EXPECT_GT(maxabs, 0.98 * bound) << name;
      EXPECT_NEAR(sum / n, 0.0, 4 * bound / std::sqrt(3 * n)) << name;
      EXPECT_NEAR(sumsq / n / (bound * bound / 3), 1.0, 0.1) << name;
      // Each quarter of [-b, b] holds about a quarter of the values.
      std::vector<int> bins(4, 0);
      for (float x : v) bins[std::min(3, static_cast<int>((x / bound + 1) * 2))]++;
      for (int b = 0; b < 4; ++b) EXPECT_NEAR(bins[b] / n, 0.25, 0.06) << name << " bin " << b;
    } else {
      EXPECT_GT(maxabs, 0.3 * bound) << name;  // not all zero, not a tiny scale
    }
  }
}

TEST(NnLeNet, ManualSeedMakesInitReproducible) {
  manual_seed(1234);
  auto a = nn_snapshot(*nn::make_model("lenet"));
  manual_seed(1234);
  auto b = nn_snapshot(*nn::make_model("lenet"));
  EXPECT_EQ(a, b);
  manual_seed(1235);
  auto c = nn_snapshot(*nn::make_model("lenet"));
  EXPECT_NE(a.at("fc1.weight"), c.at("fc1.weight"));
  // Two models built one after the other differ (the generator advances).
  manual_seed(1234);
  auto first = nn_snapshot(*nn::make_model("lenet"));
  auto second = nn_snapshot(*nn::make_model("lenet"));
  EXPECT_EQ(first, a);
  EXPECT_NE(first.at("conv1.weight"), second.at("conv1.weight"));
}

TEST(NnLayers, ConstructorArgumentsAreChecked) {
  EXPECT_THROW(nn::Conv2d(0, 6, 5), InputError);
  EXPECT_THROW(nn::Conv2d(3, 6, 0), InputError);
  EXPECT_THROW(nn::Conv2d(3, 6, 5, 0), InputError);
  EXPECT_THROW(nn::Conv2d(3, 6, 5, 1, -1), InputError);
  EXPECT_THROW(nn::Linear(0, 4), InputError);
  EXPECT_THROW(nn::Linear(4, 0), InputError);
  nn::Conv2d no_bias(3, 4, 3, 1, 1, false);
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_FALSE(no_bias.bias.defined());
  nn::MaxPool2d pool(2);
  EXPECT_EQ(pool.stride, 2);  // stride defaults to kernel_size
}

TEST(NnLayers, SequentialNamesChildrenByPosition) {
  auto inner = std::make_shared<nn::Sequential>();
  inner->add(std::make_shared<nn::Linear>(4, 3)).add(std::make_shared<nn::ReLU>());
  nn::Sequential outer;
  outer.add(std::make_shared<nn::Flatten>()).add(std::make_shared<nn::Linear>(12, 4)).add(inner);
  std::vector<std::string> names;
  for (auto& [n, t] : outer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "2.0.weight", "2.0.bias"}));
  Tensor y = outer.forward(Tensor::full({2, 3, 2, 2}, 0.5));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  for (float v : y.to_vector()) EXPECT_GE(v, 0.f);  // ends in ReLU
}

// ---- state_dict ------------------------------------------------------------------------------

TEST(NnStateDict, RoundTripCopiesEveryValue) {
  manual_seed(1);
  auto a = nn::make_model("lenet");
  manual_seed(2);
  auto b = nn::make_model("lenet");
  ASSERT_NE(nn_snapshot(*a), nn_snapshot(*b));
  b->load_state_dict(nn_state_map(*a));
  EXPECT_EQ(nn_snapshot(*a), nn_snapshot(*b));
  // Copied, not shared: changing a afterwards leaves b alone.
  auto before = nn_snapshot(*b);
  Tensor(a->named_parameters()[0].second).fill_(0.25);
  EXPECT_EQ(nn_snapshot(*b), before);
  // And the same outputs.
  Tensor x = nn_input(3, 9);
  a->load_state_dict(nn_state_map(*b));
  EXPECT_EQ(a->forward(x).to_vector(), b->forward(x).to_vector());
}

TEST(NnStateDict, EntriesAreDetachedViewsOfTheParameters) {
  manual_seed(0);
  auto m = nn::make_model("lenet");
  auto params = m->named_parameters();
  auto sd = m->state_dict();
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_FALSE(sd[i].second.requires_grad()) << sd[i].first;
    EXPECT_EQ(sd[i].second.raw_data(), params[i].second.raw_data()) << sd[i].first;
  }
}

TEST(NnStateDict, BadStateIsRefusedWithoutModifyingTheModel) {
  manual_seed(3);
  auto src = nn::make_model("lenet");
  manual_seed(4);
  auto m = nn::make_model("lenet");
  const auto before = nn_snapshot(*m);

  // Missing key (the others would fit: none may be copied).
  auto state = nn_state_map(*src);
  state.erase("fc2.bias");
  std::string msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc2.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_EQ(nn_snapshot(*m), before);

  // Unexpected key.
  state = nn_state_map(*src);
  state.emplace("fc4.weight", Tensor::zeros({2, 2}));
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc4.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected"), std::string::npos) << msg;
  EXPECT_EQ(nn_snapshot(*m), before);

  // Wrong shape, in the last entry (all earlier ones fit).
  state = nn_state_map(*src);
  state["fc3.bias"] = Tensor::zeros({11});
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc3.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(11,)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(10,)"), std::string::npos) << msg;
  EXPECT_EQ(nn_snapshot(*m), before);

  // Same element count, other shape.
  state = nn_state_map(*src);
  state["fc1.weight"] = Tensor::zeros({400, 120});
  EXPECT_THROW(m->load_state_dict(state), InputError);
  EXPECT_EQ(nn_snapshot(*m), before);

  // Several mismatches: the first is the message, the others follow it, in the model's order.
  state = nn_state_map(*src);
  state["conv2.bias"] = Tensor::zeros({3});
  state.erase("fc2.weight");
  state.emplace("fc9.bias", Tensor::zeros({1}));
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_EQ(msg, "state_dict entry 'conv2.bias' has shape (3,), the model expects (16,) (and 2 "
                 "more: state_dict is missing 'fc2.weight'; state_dict has unexpected key "
                 "'fc9.bias')")
      << msg;
  EXPECT_EQ(nn_snapshot(*m), before);

  // strict = false: missing and unexpected keys are skipped, the rest is loaded.
  state = nn_state_map(*src);
  state.erase("conv1.weight");
  state.emplace("extra", Tensor::zeros({1}));
  m->load_state_dict(state, /*strict=*/false);
  auto after = nn_snapshot(*m);
  EXPECT_EQ(after.at("conv1.weight"), before.at("conv1.weight"));
  EXPECT_EQ(after.at("fc1.weight"), nn_snapshot(*src).at("fc1.weight"));
}

// ---- modes and gradients -----------------------------------------------------------------------

TEST(NnModule, TrainAndEvalReachEverySubmodule) {
  auto m = std::dynamic_pointer_cast<nn::LeNet>(nn::make_model("lenet"));
  ASSERT_TRUE(m);
  const std::vector<nn::Module*> subs = {m->conv1.get(), m->conv2.get(), m->pool.get(),
                                         m->fc1.get(),   m->fc2.get(),   m->fc3.get()};
  EXPECT_TRUE(m->is_training());
  for (auto* s : subs) EXPECT_TRUE(s->is_training());
  m->eval();
  EXPECT_FALSE(m->is_training());
  for (auto* s : subs) EXPECT_FALSE(s->is_training());
  m->train();
  for (auto* s : subs) EXPECT_TRUE(s->is_training());
  m->train(false);
  for (auto* s : subs) EXPECT_FALSE(s->is_training());

  // Nested Sequential.
  auto inner = std::make_shared<nn::Sequential>();
  inner->add(std::make_shared<nn::ReLU>());
  nn::Sequential outer;
  outer.add(inner);
  outer.eval();
  EXPECT_FALSE(inner->is_training());
}

TEST(NnModule, ZeroGradClearsEveryGradient) {
  manual_seed(0);
  auto m = nn::make_model("lenet");
  m->zero_grad(false);  // no gradients yet: a no-op
  for (auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;

  Tensor loss = F::cross_entropy(m->forward(nn_input(4, 5)), Tensor::from_labels({0, 1, 2, 3}));
  loss.backward();
  for (auto& [n, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_EQ(p.grad().shape(), p.shape()) << n;
  }
  double total = 0;
  for (auto& [n, p] : m->named_parameters())
    for (float g : p.grad().to_vector()) total += std::fabs(g);
  EXPECT_GT(total, 0);

  m->zero_grad(/*set_to_none=*/false);
  for (auto& [n, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    for (float g : p.grad().to_vector()) ASSERT_EQ(g, 0.f) << n;
  }
  m->zero_grad(/*set_to_none=*/true);
  for (auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
}

TEST(NnModule, GradientsAccumulateUntilZeroed) {
  manual_seed(0);
  auto m = nn::make_model("lenet");
  Tensor x = nn_input(2, 6);
  Tensor y = Tensor::from_labels({3, 7});
  F::cross_entropy(m->forward(x), y).backward();
  std::vector<float> once = m->named_parameters()[0].second.grad().to_vector();
  F::cross_entropy(m->forward(x), y).backward();
  std::vector<float> twice = m->named_parameters()[0].second.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i)
    EXPECT_NEAR(twice[i], 2 * once[i], 1e-5f + 1e-4f * std::fabs(once[i]));
}

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
  Tensor x = nn_input(4, 11);
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
  b->load_state_dict(nn_state_map(*a));
  std::map<std::string, Tensor> ostate;
  for (auto& [n, t] : opt_a.state_dict()) ostate.emplace(n, t.clone());
  EXPECT_EQ(ostate.size(), 10u);
  opt_b.load_state_dict(ostate, opt_a.steps());
  EXPECT_EQ(opt_b.steps(), 2);
  step(*a, opt_a);
  step(*b, opt_b);
  EXPECT_EQ(nn_snapshot(*a), nn_snapshot(*b));

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
  F::cross_entropy(m->forward(nn_input(2, 1)), Tensor::from_labels({0, 1})).backward();
  opt.zero_grad(/*set_to_none=*/false);
  for (auto& [n, p] : m->named_parameters())
    for (float g : p.grad().to_vector()) ASSERT_EQ(g, 0.f) << n;
  opt.zero_grad(true);
  for (auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  opt.set_lr(0.5);
  EXPECT_EQ(opt.options().lr, 0.5);
  // lr = 0 (and no decay): a step leaves the parameters as they were.
  auto before = nn_snapshot(*m);
  optim::SGD frozen(m->named_parameters(), {0.0, 0.9, 0, 0, false});
  F::cross_entropy(m->forward(nn_input(2, 1)), Tensor::from_labels({0, 1})).backward();
  frozen.step();
  EXPECT_EQ(nn_snapshot(*m), before);
}
