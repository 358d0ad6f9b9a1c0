// Tests of src/nn/module.cpp and its layers: constructor arguments checked, Sequential's names,
// state_dict round trips that copy every value, detached views, bad states refused without
// modifying the model, train/eval and zero_grad reaching every submodule, gradients accumulating
// until zeroed. LeNet itself: tests/nn/models/test_lenet.cpp; SGD: tests/optim/test_sgd.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/nn/models/models.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

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
  ASSERT_NE(parameter_values(*a), parameter_values(*b));
  b->load_state_dict(cloned_state(*a));
  EXPECT_EQ(parameter_values(*a), parameter_values(*b));
  // Copied, not shared: changing a afterwards leaves b alone.
  auto before = parameter_values(*b);
  Tensor(a->named_parameters()[0].second).fill_(0.25);
  EXPECT_EQ(parameter_values(*b), before);
  // And the same outputs.
  Tensor x = uniform_images(3, 9);
  a->load_state_dict(cloned_state(*b));
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
  const auto before = parameter_values(*m);

  // Missing key (the others would fit: none may be copied).
  auto state = cloned_state(*src);
  state.erase("fc2.bias");
  std::string msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc2.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_EQ(parameter_values(*m), before);

  // Unexpected key.
  state = cloned_state(*src);
  state.emplace("fc4.weight", Tensor::zeros({2, 2}));
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc4.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected"), std::string::npos) << msg;
  EXPECT_EQ(parameter_values(*m), before);

  // Wrong shape, in the last entry (all earlier ones fit).
  state = cloned_state(*src);
  state["fc3.bias"] = Tensor::zeros({11});
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_NE(msg.find("fc3.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(11,)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(10,)"), std::string::npos) << msg;
  EXPECT_EQ(parameter_values(*m), before);

  // Same element count, other shape.
  state = cloned_state(*src);
  state["fc1.weight"] = Tensor::zeros({400, 120});
  EXPECT_THROW(m->load_state_dict(state), InputError);
  EXPECT_EQ(parameter_values(*m), before);

  // Several mismatches: the first is the message, the others follow it, in the model's order.
  state = cloned_state(*src);
  state["conv2.bias"] = Tensor::zeros({3});
  state.erase("fc2.weight");
  state.emplace("fc9.bias", Tensor::zeros({1}));
  msg = input_error([&] { m->load_state_dict(state); });
  EXPECT_EQ(msg,
            "state_dict entry 'conv2.bias' has shape (3,), the model expects (16,) (and 2 "
            "more: state_dict is missing 'fc2.weight'; state_dict has unexpected key "
            "'fc9.bias')")
      << msg;
  EXPECT_EQ(parameter_values(*m), before);

  // strict = false: missing and unexpected keys are skipped, the rest is loaded.
  state = cloned_state(*src);
  state.erase("conv1.weight");
  state.emplace("extra", Tensor::zeros({1}));
  m->load_state_dict(state, /*strict=*/false);
  auto after = parameter_values(*m);
  EXPECT_EQ(after.at("conv1.weight"), before.at("conv1.weight"));
  EXPECT_EQ(after.at("fc1.weight"), parameter_values(*src).at("fc1.weight"));
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

  Tensor loss =
      F::cross_entropy(m->forward(uniform_images(4, 5)), Tensor::from_labels({0, 1, 2, 3}));
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
  Tensor x = uniform_images(2, 6);
  Tensor y = Tensor::from_labels({3, 7});
  F::cross_entropy(m->forward(x), y).backward();
  std::vector<float> once = m->named_parameters()[0].second.grad().to_vector();
  F::cross_entropy(m->forward(x), y).backward();
  std::vector<float> twice = m->named_parameters()[0].second.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i)
    EXPECT_NEAR(twice[i], 2 * once[i], 1e-5f + 1e-4f * std::fabs(once[i]));
}
