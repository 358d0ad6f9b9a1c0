// Autograd's bookkeeping in double precision: gradients accumulate across backward calls, and
// nothing is recorded under NoGradGuard. (Each op's finite-difference check, Ops/<op>.
// GradcheckFloat64, is generated from its samples in src/ops/<family>/test_cases.cpp by
// tests/ops/op_checks.cpp.)
#include <gtest/gtest.h>

#include <vector>

#include "hpcnet/functional.h"

using namespace hpcnet;

TEST(Gradcheck, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector_f64({1, -2, 3}, {3});
  x.set_requires_grad(true);
  F::sum(F::relu(x)).backward();
  F::sum(x).backward();
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{2, 1, 2}));
}

TEST(Gradcheck, NoGradRecordsNothing) {
  Tensor x = Tensor::from_vector_f64({1, 2}, {2});
  x.set_requires_grad(true);
  NoGradGuard ng;
  Tensor y = F::relu(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}
