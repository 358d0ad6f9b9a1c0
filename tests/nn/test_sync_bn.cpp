// SyncBatchNorm (F::sync_batch_norm_act, nn::BatchNorm2d::sync): two "ranks" as two threads, each
// with half of a batch and a rank sum that adds their buffers, give the output, the input
// gradient and the running statistics of batch_norm over the whole batch, and weight/bias
// gradients whose sum is the whole batch's (the data-parallel average then makes it the mean).
// The real multi-process run is tested under mpirun in tests/dist/test_dist.cpp.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"

using namespace hpcnet;

namespace {

Tensor randn(const Shape& s, Rng& rng, DType dt, double scale = 1.0, double shift = 0.0) {
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = shift + rng.normal() * scale;
  return t.to(dt);
}

// An all-reduce (sum) of doubles between two threads.
class TwoPartySum {
 public:
  F::RankSum for_rank(int r) {
    return [this, r](double* d, size_t n) {
      slot_[r].assign(d, d + n);
      sync_.arrive_and_wait();
      for (size_t i = 0; i < n; ++i) d[i] = slot_[0][i] + slot_[1][i];
      sync_.arrive_and_wait();  // both have read before either writes again
      ++calls_[r];
    };
  }
  int calls(int r) const { return calls_[r]; }

 private:
  std::barrier<> sync_{2};
  std::vector<double> slot_[2];
  int calls_[2] = {0, 0};
};

void expect_near(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const std::vector<double> u = a.to_vector_f64(), v = b.to_vector_f64();
  ASSERT_EQ(u.size(), v.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::abs(u[i] - v[i]));
  EXPECT_LE(worst, tol) << what;
}

struct Case {
  DType dtype;
  bool relu, residual;
  double tol;
};

}  // namespace

TEST(SyncBatchNorm, TwoRanksOfHalfABatchMatchOneBatch) {
  for (const Case& c :
       {Case{DType::kFloat64, false, false, 1e-12}, Case{DType::kFloat64, true, true, 1e-12},
        Case{DType::kFloat32, true, false, 2e-5}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + (c.relu ? " relu" : "") +
                 (c.residual ? " residual" : ""));
    Rng rng(7);
    const int64_t C = 3;
    // Halves with different means and spreads, so the ranks' own statistics differ.
    Tensor x0 = randn({2, C, 4, 5}, rng, c.dtype, 1.0, 0.5);
    Tensor x1 = randn({3, C, 4, 5}, rng, c.dtype, 3.0, -1.0);  // uneven halves too
    Tensor r0 = randn({2, C, 4, 5}, rng, c.dtype), r1 = randn({3, C, 4, 5}, rng, c.dtype);
    Tensor g0 = randn({2, C, 4, 5}, rng, c.dtype), g1 = randn({3, C, 4, 5}, rng, c.dtype);
    const Tensor w = randn({C}, rng, c.dtype, 0.5, 1.0), b = randn({C}, rng, c.dtype);
    const Tensor rm0 = randn({C}, rng, c.dtype), rv0 = randn({C}, rng, c.dtype, 0.1, 1.0);

    // One batch.
    Tensor x = F::cat({x0, x1}, 0).detach();
    x.set_requires_grad(true);
    Tensor wf = w.clone(), bf = b.clone(), rmf = rm0.clone(), rvf = rv0.clone();
    wf.set_requires_grad(true);
    bf.set_requires_grad(true);
    Tensor res = c.residual ? F::cat({r0, r1}, 0) : Tensor();
    Tensor y = F::batch_norm_act(x, wf, bf, rmf, rvf, true, 0.1, 1e-3, res, c.relu);
    F::sum(F::mul(y, F::cat({g0, g1}, 0))).backward();

    // Two ranks.
    TwoPartySum ranks;
    struct Out {
      Tensor x, w, b, rm, rv, y;
    } out[2];
    auto rank = [&](int k) {
      Out& o = out[k];
      o.x = (k == 0 ? x0 : x1).clone();
      o.x.set_requires_grad(true);
      o.w = w.clone();
      o.b = b.clone();
      o.w.set_requires_grad(true);
      o.b.set_requires_grad(true);
      o.rm = rm0.clone();
      o.rv = rv0.clone();
      Tensor rk = c.residual ? (k == 0 ? r0 : r1) : Tensor();
      o.y = F::sync_batch_norm_act(o.x, o.w, o.b, o.rm, o.rv, 0.1, 1e-3, rk, c.relu,
                                   ranks.for_rank(k));
      F::sum(F::mul(o.y, k == 0 ? g0 : g1)).backward();
    };
    std::thread t1(rank, 1);
    rank(0);
    t1.join();
    EXPECT_EQ(ranks.calls(0), 3);  // forward: mean, variance; backward: the two gradient sums
    EXPECT_EQ(ranks.calls(1), 3);

    expect_near(F::cat({out[0].y, out[1].y}, 0), y, c.tol, "output");
    expect_near(F::cat({out[0].x.grad(), out[1].x.grad()}, 0), x.grad(), c.tol, "input gradient");
    expect_near(F::add(out[0].w.grad(), out[1].w.grad()), wf.grad(), c.tol, "weight gradient");
    expect_near(F::add(out[0].b.grad(), out[1].b.grad()), bf.grad(), c.tol, "bias gradient");
    for (int k = 0; k < 2; ++k) {
      expect_near(out[k].rm, rmf, c.tol, "running_mean of rank " + std::to_string(k));
      expect_near(out[k].rv, rvf, c.tol, "running_var of rank " + std::to_string(k));
    }
  }
}

// The module: with `sync` set it runs the synchronised form in training (one rank: the same as
// without), and plain batch_norm in eval mode (no rank sum called).
TEST(SyncBatchNorm, ModuleUsesTheRankSumInTrainingOnly) {
  Rng rng(3);
  Tensor x = randn({4, 2, 3, 3}, rng, DType::kFloat32, 2.0, 1.0);
  nn::BatchNorm2d plain(2), synced(2);
  int calls = 0;
  synced.sync = [&calls](double*, size_t) { ++calls; };
  Tensor a = plain.forward(x), b = synced.forward(x);
  EXPECT_EQ(calls, 2);
  expect_near(a, b, 1e-5, "training output");
  expect_near(plain.running_mean, synced.running_mean, 1e-6, "running_mean");
  expect_near(plain.running_var, synced.running_var, 1e-6, "running_var");
  synced.eval();
  plain.eval();
  expect_near(plain.forward(x), synced.forward(x), 1e-6, "eval output");
  EXPECT_EQ(calls, 2);
}
