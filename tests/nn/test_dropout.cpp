// Tests of dropout (F::dropout, nn::Dropout): the rate and scaling in training, the identity cases,
// reproducible masks under manual_seed, bad probabilities, and the module in train and eval mode.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- dropout -----------------------------------------------------------------------------------

TEST(ResnetDropout, TrainingZeroesAboutPAndScalesTheRest) {
  const int64_t n = 100000;
  Rng rng(5);
  std::vector<float> xv(static_cast<size_t>(n));
  for (float& v : xv) v = rng.uniform(0.5f, 1.5f);  // never zero
  Tensor x = Tensor::from_vector(xv, {n});
  manual_seed(7);
  Tensor y = F::dropout(x, 0.3, true);
  ASSERT_EQ(y.shape(), x.shape());
  std::vector<float> yv = y.to_vector();
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv[i] == 0.f) {
      ++zeros;
      continue;
    }
    const double want = xv[i] / 0.7;
    ASSERT_NEAR(yv[i], want, 1e-6 * want) << "element " << i;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / n, 0.3, 0.01);
  // The input is untouched.
  EXPECT_EQ(x.to_vector(), xv);
}

TEST(ResnetDropout, IdentityCasesAndPOne) {
  Tensor x = normal_tensor({4, 50}, 6);
  const std::vector<float> xv = x.to_vector();
  EXPECT_EQ(F::dropout(x, 0.0, true).to_vector(), xv);
  EXPECT_EQ(F::dropout(x, 0.5, false).to_vector(), xv);
  EXPECT_EQ(F::dropout(x, 1.0, false).to_vector(), xv);
  std::vector<float> all = F::dropout(x, 1.0, true).to_vector();
  for (float v : all) ASSERT_EQ(v, 0.f);
  EXPECT_EQ(all.size(), xv.size());
  for (float v : all) ASSERT_FALSE(std::isnan(v));
}

TEST(ResnetDropout, ManualSeedReproducesTheMask) {
  Tensor x = Tensor::full({2000}, 1.0);
  manual_seed(42);
  std::vector<float> a = F::dropout(x, 0.5, true).to_vector();
  std::vector<float> next = F::dropout(x, 0.5, true).to_vector();
  manual_seed(42);
  std::vector<float> b = F::dropout(x, 0.5, true).to_vector();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, next);  // the generator advances
  manual_seed(43);
  EXPECT_NE(F::dropout(x, 0.5, true).to_vector(), a);
}

TEST(ResnetDropout, ProbabilityOutsideZeroOneThrows) {
  Tensor x = Tensor::full({10}, 1.0);
  EXPECT_ANY_THROW(F::dropout(x, -0.1, true));
  EXPECT_ANY_THROW(F::dropout(x, 1.5, true));
  EXPECT_ANY_THROW(F::dropout(x, std::nan(""), true));
  EXPECT_THROW(nn::Dropout(-0.1), InputError);
  EXPECT_THROW(nn::Dropout(1.01), InputError);
  EXPECT_NO_THROW(nn::Dropout(0.0));
  EXPECT_NO_THROW(nn::Dropout(1.0));
}

TEST(ResnetDropout, ModuleFollowsTrainAndEvalAndBackpropagatesTheMask) {
  nn::Dropout d(0.5);
  Tensor x = normal_tensor({1000}, 8, 1.0, 5.0);  // all far from zero
  const std::vector<float> xv = x.to_vector();
  ASSERT_TRUE(d.is_training());
  auto count_zeros = [](const std::vector<float>& v) {
    return std::count(v.begin(), v.end(), 0.f);
  };
  manual_seed(1);
  EXPECT_GT(count_zeros(d(x).to_vector()), 400);
  d.eval();
  EXPECT_EQ(d(x).to_vector(), xv);
  d.train();
  EXPECT_GT(count_zeros(d(x).to_vector()), 400);

  // Gradient: 1 / (1 - p) where kept, 0 where dropped.
  Tensor xg = x.clone();
  xg.set_requires_grad(true);
  Tensor y = d(xg);
  F::sum(y).backward();
  ASSERT_TRUE(xg.grad().defined());
  std::vector<float> yv = y.to_vector(), gv = xg.grad().to_vector();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(gv[i], yv[i] == 0.f ? 0.f : 2.f) << i;
}
