// The semantic-segmentation ops on the CPU (upsample_nearest2d, cat, cross_entropy2d): values on
// hand-made inputs, blocked inputs, kernels overwriting garbage-filled outputs, results that do
// not depend on the thread count, torch's edge cases (every pixel ignored, an empty batch) and
// the InputErrors for bad arguments. Gradients, PyTorch's numbers and the CUDA kernels: each op's
// checks, Ops/<op>.*, from src/ops/<family>/test_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/ops.h"
#include "test_util.h"

using namespace hpcnet;
using hpcnet::test_util::input_error;
using hpcnet::test_util::same_bytes;

namespace {

Tensor randn(const Shape& s, Rng& rng, DType t = DType::kFloat64) {
  Tensor x = Tensor::empty(s, DType::kFloat64);
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = rng.normal();
  return x.to(t);
}

Tensor labels(const std::vector<int64_t>& v, const Shape& s) {
  return Tensor::from_labels(v).view_nograd(s);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Threads for one scope.
struct Threads {
  explicit Threads(int n) : prev(ops::get_num_threads()) { ops::set_num_threads(n); }
  ~Threads() { ops::set_num_threads(prev); }
  int prev;
};

}  // namespace

// ---- upsample_nearest2d ----

TEST(UpsampleNearest2d, RepeatsEachPixelAndSumsBlocksBackward) {
  Tensor x = Tensor::from_vector_f64({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  x.set_requires_grad(true);
  Tensor y = F::upsample_nearest2d(x, 2);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 6}));
  EXPECT_EQ(y.to_vector_f64(), (std::vector<double>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3,
                                                    4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6}));
  std::vector<double> g(24);
  for (int i = 0; i < 24; ++i) g[i] = i;
  y.backward(Tensor::from_vector_f64(g, {1, 1, 4, 6}));
  // Block (0, 0) holds 0, 1, 6, 7; block (1, 2) holds 16, 17, 22, 23.
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{14, 22, 30, 62, 70, 78}));
}

TEST(UpsampleNearest2d, KernelsOverwriteAndScaleOneCopies) {
  Rng rng(1);
  for (DType t : {DType::kFloat32, DType::kFloat64})
    for (int64_t s : {1, 2, 3}) {
      Tensor x = randn({2, 3, 4, 5}, rng, t);
      Tensor y = Tensor::full({2, 3, 4 * s, 5 * s}, NAN, t);
      ops::upsample_nearest2d_forward(x, y, s);
      Tensor dx = Tensor::full(x.shape(), NAN, t);
      ops::upsample_nearest2d_backward(y, dx, s);
      auto xv = x.to_vector_f64(), yv = y.to_vector_f64(), dv = dx.to_vector_f64();
      for (int64_t i = 0; i < y.numel(); ++i) {
        int64_t col = i % (5 * s), row = i / (5 * s) % (4 * s), plane = i / (20 * s * s);
        ASSERT_EQ(yv[i], xv[(plane * 4 + row / s) * 5 + col / s]) << i;
      }
      // Backward of the forward's output: each block holds s * s copies of x.
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_NEAR(dv[i], xv[i] * static_cast<double>(s * s), 1e-5 * std::abs(xv[i]) * s * s);
    }
}

TEST(UpsampleNearest2d, BlockedInputGivesTheRowMajorValues) {
  Rng rng(2);
  Tensor x = randn({1, 16, 3, 2}, rng);
  Tensor xb = x.to_layout(Layout::kBlocked16);
  xb.set_requires_grad(true);
  Tensor y = F::upsample_nearest2d(xb, 2);
  EXPECT_EQ(y.layout(), Layout::kBlocked16);  // kept (Layout.NearestUpsamplingOf...StaysBlocked)
  EXPECT_TRUE(same_bytes(y.contiguous(), F::upsample_nearest2d(x, 2)));
  F::sum(y).backward();
  for (double v : xb.grad().to_vector_f64()) ASSERT_EQ(v, 4.0);
}

TEST(UpsampleNearest2d, BadArgumentsAreInputErrors) {
  Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_TRUE(contains(input_error([&] { F::upsample_nearest2d(x, 2); }), "(2, 3, 4)"));
  Tensor x4 = Tensor::zeros({1, 2, 3, 4});
  EXPECT_TRUE(contains(input_error([&] { F::upsample_nearest2d(x4, 0); }), "scale"));
  Tensor xi = Tensor::zeros({1, 2, 3, 4}, DType::kInt64);
  EXPECT_TRUE(contains(input_error([&] { F::upsample_nearest2d(xi, 2); }), "int64"));
}

// ---- cat ----

TEST(Cat, ConcatenatesAlongAnyDimAndSplitsTheGradient) {
  Tensor a = Tensor::from_vector_f64({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector_f64({5, 6}, {2, 1});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = F::cat({a, b}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector_f64(), (std::vector<double>{1, 2, 5, 3, 4, 6}));
  y.backward(Tensor::from_vector_f64({10, 20, 30, 40, 50, 60}, {2, 3}));
  EXPECT_EQ(a.grad().to_vector_f64(), (std::vector<double>{10, 20, 40, 50}));
  EXPECT_EQ(b.grad().to_vector_f64(), (std::vector<double>{30, 60}));
  // dim 0 and negative dims, as torch.
  EXPECT_EQ(F::cat({a, a}, 0).shape(), (Shape{4, 2}));
  EXPECT_EQ(F::cat({a, b}, -1).to_vector_f64(), y.to_vector_f64());
  // Any dtype forward (no gradient): int64 class maps.
  Tensor l = F::cat({Tensor::from_labels({1, 2}), Tensor::from_labels({3})}, 0);
  EXPECT_EQ(l.dtype(), DType::kInt64);
  EXPECT_EQ(l.to_vector_f64(), (std::vector<double>{1, 2, 3}));
}

TEST(Cat, OnlyInputsThatRequireGradGetOne) {
  Rng rng(3);
  Tensor a = randn({2, 2, 3, 3}, rng), b = randn({2, 1, 3, 3}, rng);
  a.set_requires_grad(true);
  F::sum(F::cat({a, b}, 1)).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  NoGradGuard ng;
  EXPECT_FALSE(F::cat({a, b}, 1).requires_grad());
}

TEST(Cat, KernelsOverwriteAndSkipUndefinedGradients) {
  Rng rng(4);
  Tensor a = randn({2, 3, 2, 2}, rng), b = randn({2, 5, 2, 2}, rng);
  Tensor y = Tensor::full({2, 8, 2, 2}, NAN, DType::kFloat64);
  ops::cat_forward({a, b}, y, 1);
  std::vector<Tensor> dxs = {Tensor(), Tensor::full(b.shape(), NAN, DType::kFloat64)};
  ops::cat_backward(y, {3, 5}, dxs, 1);
  EXPECT_FALSE(dxs[0].defined());
  EXPECT_TRUE(same_bytes(dxs[1], b));
  auto yv = y.to_vector_f64();
  for (double v : yv) ASSERT_FALSE(std::isnan(v));
}

TEST(Cat, BlockedAndRowMajorInputsMix) {
  Rng rng(5);
  Tensor a = randn({2, 16, 3, 3}, rng), b = randn({2, 4, 3, 3}, rng);
  Tensor ab = a.to_layout(Layout::kBlocked16);
  ab.set_requires_grad(true);
  Tensor y = F::cat({ab, b}, 1);
  EXPECT_EQ(y.layout(), Layout::kStrided);
  EXPECT_TRUE(same_bytes(y, F::cat({a, b}, 1)));
  F::sum(y).backward();
  for (double v : ab.grad().to_vector_f64()) ASSERT_EQ(v, 1.0);
}

TEST(Cat, BadArgumentsAreInputErrors) {
  Tensor a = Tensor::zeros({2, 3, 4, 4}), b = Tensor::zeros({2, 2, 4, 5});
  EXPECT_TRUE(contains(input_error([] { F::cat({}, 1); }), "at least one"));
  std::string e = input_error([&] { F::cat({a, b}, 1); });
  EXPECT_TRUE(contains(e, "tensor 1 (2, 2, 4, 5)") && contains(e, "(2, 3, 4, 4)")) << e;
  EXPECT_TRUE(contains(input_error([&] { F::cat({a, b}, 3); }), "outside dim 3"));
  EXPECT_EQ(F::cat({a, Tensor::zeros({2, 3, 4, 5})}, 3).shape(), (Shape{2, 3, 4, 9}));
  EXPECT_TRUE(contains(input_error([&] { F::cat({a, Tensor::zeros({2, 3, 4})}, 1); }), "rank"));
  EXPECT_TRUE(contains(input_error([&] { F::cat({a, a.to(DType::kFloat64)}, 1); }), "float64"));
  EXPECT_TRUE(contains(input_error([&] { F::cat({a, a}, 4); }), "dim 4"));
  EXPECT_TRUE(contains(input_error([&] { F::cat({a, a}, -5); }), "dim -5"));
}

// ---- cross_entropy2d ----

namespace {
// The reference: per-pixel -log_softmax at the target, weighted, in double from the definition.
double reference_ce2d(const Tensor& logits, const std::vector<int64_t>& t,
                      const std::vector<double>& w, int64_t ignore) {
  const int64_t n = logits.size(0), c = logits.size(1), hw = logits.size(2) * logits.size(3);
  auto x = logits.to_vector_f64();
  double num = 0, den = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < hw; ++p) {
      int64_t k = t[b * hw + p];
      if (k == ignore) continue;
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += std::exp(x[(b * c + j) * hw + p]);
      double wk = w.empty() ? 1.0 : w[k];
      num += wk * (std::log(s) - x[(b * c + k) * hw + p]);
      den += wk;
    }
  return num / den;
}
}  // namespace

TEST(CrossEntropy2d, IsTheWeightedMeanOverCountedPixels) {
  Rng rng(6);
  Tensor x = randn({2, 3, 2, 2}, rng);
  std::vector<int64_t> t = {0, 2, 255, 1, 1, 255, 0, 2};
  std::vector<double> w = {0.5, 2.0, 1.5};
  Tensor wt = Tensor::from_vector_f64(w, {3});
  EXPECT_NEAR(F::cross_entropy2d(x, labels(t, {2, 2, 2})).item(), reference_ce2d(x, t, {}, 255),
              1e-14);
  EXPECT_NEAR(F::cross_entropy2d(x, labels(t, {2, 2, 2}), wt).item(), reference_ce2d(x, t, w, 255),
              1e-14);
  // ignore_index may be any value, a class included (255 is then an ordinary bad label).
  std::vector<int64_t> t2 = {0, 2, 0, 1, 1, 0, 0, 2};
  EXPECT_NEAR(F::cross_entropy2d(x, labels(t2, {2, 2, 2}), wt, 2).item(),
              reference_ce2d(x, t2, w, 2), 1e-14);
}

TEST(CrossEntropy2d, MatchesCrossEntropyOnPixelsAsRows) {
  Rng rng(7);
  const int64_t n = 2, c = 5, h = 3, w = 4;
  Tensor x = randn({n, c, h, w}, rng);
  std::vector<int64_t> t(n * h * w);
  for (auto& v : t) v = static_cast<int64_t>(rng.randint(c));
  // rows (n h w, c) of the same logits
  auto xv = x.to_vector_f64();
  std::vector<double> rows(xv.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t p = 0; p < h * w; ++p)
        rows[(b * h * w + p) * c + j] = xv[(b * c + j) * h * w + p];
  Tensor xr = Tensor::from_vector_f64(rows, {n * h * w, c});
  x.set_requires_grad(true);
  xr.set_requires_grad(true);
  Tensor a = F::cross_entropy2d(x, labels(t, {n, h, w})),
         b = F::cross_entropy(xr, Tensor::from_labels(t));
  EXPECT_NEAR(a.item(), b.item(), 1e-14);
  a.backward();
  b.backward();
  auto ga = x.grad().to_vector_f64(), gb = xr.grad().to_vector_f64();
  for (int64_t b2 = 0; b2 < n; ++b2)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t p = 0; p < h * w; ++p)
        ASSERT_NEAR(ga[(b2 * c + j) * h * w + p], gb[(b2 * h * w + p) * c + j], 1e-15);
}

TEST(CrossEntropy2d, EveryPixelIgnoredOrAnEmptyBatchIsNaNWithZeroGradient) {
  Rng rng(8);
  Tensor x = randn({2, 3, 2, 2}, rng);
  x.set_requires_grad(true);
  Tensor loss = F::cross_entropy2d(x, Tensor::full({2, 2, 2}, 255, DType::kInt64),
                                   Tensor::from_vector_f64({1, 2, 3}, {3}));
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  for (double v : x.grad().to_vector_f64()) ASSERT_EQ(v, 0.0);
  Tensor empty = Tensor::zeros({0, 3, 2, 2}, DType::kFloat64);
  EXPECT_TRUE(
      std::isnan(F::cross_entropy2d(empty, Tensor::zeros({0, 2, 2}, DType::kInt64)).item()));
}

// The float32 path (plane-wise, its own exp) treats what is not a finite number as the float64
// path and torch do: a NaN logit, or +inf, at a counted pixel makes the loss NaN; -inf in another
// class is a probability of 0; a NaN at an ignored pixel is left out; no counted pixel is 0 / 0.
TEST(CrossEntropy2d, Float32NonFiniteLogitsAndNoCountedPixelsAsFloat64) {
  const int64_t n = 2, c = 3, h = 4, w = 5, hw = h * w;
  Rng rng(10);
  Tensor base = randn({n, c, h, w}, rng, DType::kFloat32);
  std::vector<int64_t> t(n * hw);
  for (auto& v : t) v = static_cast<int64_t>(rng.randint(c));
  t[7] = 255;
  auto loss_of = [&](const std::vector<float>& x, const std::vector<int64_t>& tv, DType dt) {
    Tensor xt = Tensor::from_vector(x, {n, c, h, w}).to(dt);
    return F::cross_entropy2d(xt, labels(tv, {n, h, w})).item();
  };
  auto x0 = base.to_vector();
  auto with = [&](int64_t b, int64_t j, int64_t p, float v) {
    auto x = x0;
    x[(b * c + j) * hw + p] = v;
    return x;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t p = 12, b = 1, tp = t[b * hw + p], other = (tp + 1) % c;
  struct Case {
    const char* what;
    std::vector<float> x;
    bool nan;
  };
  const Case cases[] = {
      {"NaN at the target", with(b, tp, p, NAN), true},
      {"NaN in another class", with(b, other, p, NAN), true},
      {"NaN in class 0", with(b, 0, p, NAN), true},
      {"+inf at the target", with(b, tp, p, inf), true},
      {"-inf in another class", with(b, other, p, -inf), false},
      {"NaN at an ignored pixel", with(0, 1, 7, NAN), false},
  };
  for (const Case& k : cases) {
    const double l32 = loss_of(k.x, t, DType::kFloat32), l64 = loss_of(k.x, t, DType::kFloat64);
    EXPECT_EQ(std::isnan(l32), k.nan) << k.what << ": " << l32;
    EXPECT_EQ(std::isnan(l64), k.nan) << k.what << ": " << l64;
    if (!k.nan) EXPECT_NEAR(l32, l64, 1e-5 * std::max(1.0, l64)) << k.what;
  }
  // every pixel ignored, and an empty batch: NaN with a zero gradient, in float32 as in float64
  Tensor x = base.detach();
  x.set_requires_grad(true);
  Tensor loss = F::cross_entropy2d(x, Tensor::full({n, h, w}, 255, DType::kInt64));
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  for (double v : x.grad().to_vector_f64()) ASSERT_EQ(v, 0.0);
  EXPECT_TRUE(std::isnan(F::cross_entropy2d(Tensor::zeros({0, c, h, w}, DType::kFloat32),
                                            Tensor::zeros({0, h, w}, DType::kInt64))
                             .item()));
}

TEST(CrossEntropy2d, OutOfRangeLabelsAreInputErrorsNamingValueAndPixel) {
  Tensor x = Tensor::zeros({2, 4, 2, 3}, DType::kFloat32);
  std::vector<int64_t> t(12, 1);
  t[10] = 7;  // image 1, h 1, w 1
  std::string e = input_error([&] { F::cross_entropy2d(x, labels(t, {2, 2, 3})); });
  EXPECT_TRUE(contains(e, "label 7") && contains(e, "(n=1, h=1, w=1)") && contains(e, "[0, 4)") &&
              contains(e, "ignore_index 255"))
      << e;
  t[10] = -1;
  EXPECT_TRUE(contains(input_error([&] {
                         F::cross_entropy2d(x, labels(t, {2, 2, 3}));
                       }),
                       "label -1"));
  t[10] = 255;  // ignored by default, out of range with another ignore_index
  EXPECT_EQ(input_error([&] { F::cross_entropy2d(x, labels(t, {2, 2, 3})); }), "no exception");
  EXPECT_TRUE(contains(input_error([&] {
                         F::cross_entropy2d(x, labels(t, {2, 2, 3}), Tensor(), -100);
                       }),
                       "label 255"));
}

TEST(CrossEntropy2d, BadArgumentsAreInputErrors) {
  Tensor x = Tensor::zeros({2, 4, 2, 3});
  Tensor t = Tensor::zeros({2, 2, 3}, DType::kInt64);
  EXPECT_TRUE(contains(input_error([&] {
                         F::cross_entropy2d(Tensor::zeros({2, 4, 6}), t);
                       }),
                       "(N, C, H, W)"));
  std::string e = input_error([&] {
    F::cross_entropy2d(x, Tensor::zeros({2, 3, 2}, DType::kInt64));
  });
  EXPECT_TRUE(contains(e, "(2, 4, 2, 3)") && contains(e, "(2, 3, 2)")) << e;
  EXPECT_TRUE(contains(input_error([&] {
                         F::cross_entropy2d(x, Tensor::zeros({2, 2, 3}));
                       }),
                       "int64"));
  e = input_error([&] { F::cross_entropy2d(x, t, Tensor::zeros({3})); });
  EXPECT_TRUE(contains(e, "weight must be (C,) = (4,), got (3,)")) << e;
  e = input_error([&] { F::cross_entropy2d(x, t, Tensor::zeros({4}, DType::kFloat64)); });
  EXPECT_TRUE(contains(e, "weight has dtype float64")) << e;
  e = input_error([&] { F::cross_entropy2d(x.to(DType::kInt64), t); });
  EXPECT_TRUE(contains(e, "float32 or float64")) << e;
}

TEST(CrossEntropy2d, KernelsOverwriteAndIgnoreTheThreadCount) {
  Rng rng(9);
  const int64_t n = 3, c = 6, h = 40, w = 50;  // several pixel chunks per image
  Tensor x = randn({n, c, h, w}, rng, DType::kFloat32);
  std::vector<int64_t> t(n * h * w);
  for (auto& v : t) v = rng.uniform() < 0.2 ? 255 : static_cast<int64_t>(rng.randint(c));
  Tensor tgt = labels(t, {n, h, w});
  Tensor wt = Tensor::from_vector({1, 0.5, 2, 1, 3, 0.25}, {6});
  auto run = [&](int threads) {
    Threads th(threads);
    Tensor loss = Tensor::full({}, NAN), prob = Tensor::full(x.shape(), NAN);
    Tensor tw = Tensor::full({}, NAN, DType::kFloat64), d = Tensor::full(x.shape(), NAN);
    ops::cross_entropy2d_forward(x, tgt, wt, 255, loss, prob, tw);
    ops::cross_entropy2d_backward(Tensor::full({}, 1.0), prob, tgt, wt, tw, 255, d);
    return std::vector<Tensor>{loss, prob, tw, d};
  };
  auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(same_bytes(one[i], two[i])) << "output " << i;
    for (double v : one[i].to_vector_f64()) ASSERT_FALSE(std::isnan(v)) << "output " << i;
  }
  // float32 (plane-wise, vectorised exp) against the float64 kernels on the same inputs: the
  // loss, each probability and each gradient; then on logits 40x larger, where most
  // exponentials underflow and the largest dominate.
  for (double scale : {1.0, 40.0}) {
    Tensor xs = F::mul_scalar(x, scale);
    Tensor x64 = xs.to(DType::kFloat64), wt64 = wt.to(DType::kFloat64);
    Tensor loss = Tensor::full({}, NAN), prob = Tensor::full(x.shape(), NAN);
    Tensor tw = Tensor::full({}, NAN, DType::kFloat64), d = Tensor::full(x.shape(), NAN);
    ops::cross_entropy2d_forward(xs, tgt, wt, 255, loss, prob, tw);
    ops::cross_entropy2d_backward(Tensor::full({}, 1.0), prob, tgt, wt, tw, 255, d);
    Tensor loss64 = Tensor::full({}, NAN, DType::kFloat64);
    Tensor prob64 = Tensor::full(x.shape(), NAN, DType::kFloat64);
    Tensor tw64 = Tensor::full({}, NAN, DType::kFloat64);
    Tensor d64 = Tensor::full(x.shape(), NAN, DType::kFloat64);
    ops::cross_entropy2d_forward(x64, tgt, wt64, 255, loss64, prob64, tw64);
    ops::cross_entropy2d_backward(Tensor::full({}, 1.0, DType::kFloat64), prob64, tgt, wt64, tw64,
                                  255, d64);
    EXPECT_NEAR(loss.item(), loss64.item(), 1e-5 * std::max(1.0, loss64.item())) << scale;
    EXPECT_EQ(tw.item(), tw64.item());
    auto p32 = prob.to_vector_f64(), p64 = prob64.to_vector_f64();
    auto g32 = d.to_vector_f64(), g64 = d64.to_vector_f64();
    for (size_t i = 0; i < p32.size(); ++i) {
      ASSERT_NEAR(p32[i], p64[i], 1e-6) << "scale " << scale << " prob " << i;
      ASSERT_NEAR(g32[i], g64[i], 1e-9) << "scale " << scale << " grad " << i;
    }
  }
}

TEST(CrossEntropy2d, BlockedLogitsGiveTheRowMajorResult) {
  Rng rng(10);
  Tensor x = randn({2, 16, 3, 2}, rng);
  std::vector<int64_t> t(12);
  for (auto& v : t) v = static_cast<int64_t>(rng.randint(16));
  t[3] = 255;
  Tensor xb = x.to_layout(Layout::kBlocked16);
  xb.set_requires_grad(true);
  x.set_requires_grad(true);
  Tensor a = F::cross_entropy2d(xb, labels(t, {2, 3, 2})),
         b = F::cross_entropy2d(x, labels(t, {2, 3, 2}));
  EXPECT_EQ(a.item(), b.item());
  a.backward();
  b.backward();
  EXPECT_TRUE(same_bytes(xb.grad(), x.grad()));
}

// ---- upsample_bilinear2d ----

// Hand values: align_corners maps the corners onto each other (2 -> 3 samples: the midpoint is
// the mean); pixel centres (align_corners=False) 2 -> 4 give 0.25 / 0.75 blends and clamp at the
// borders; 1 x 1 broadcasts; downsampling by 2 averages neighbouring pairs.
TEST(UpsampleBilinear2d, HandValues) {
  Tensor x = Tensor::from_vector_f64({0, 4, 8, 12}, {1, 1, 2, 2});
  EXPECT_EQ(F::upsample_bilinear2d(x, 3, 3, true).to_vector_f64(),
            (std::vector<double>{0, 2, 4, 4, 6, 8, 8, 10, 12}));
  Tensor row = Tensor::from_vector_f64({0, 4}, {1, 1, 1, 2});
  EXPECT_EQ(F::upsample_bilinear2d(row, 1, 4, false).to_vector_f64(),
            (std::vector<double>{0, 1, 3, 4}));
  Tensor one = Tensor::from_vector_f64({2.5}, {1, 1, 1, 1});
  for (bool a : {false, true})
    EXPECT_EQ(F::upsample_bilinear2d(one, 2, 3, a).to_vector_f64(), std::vector<double>(6, 2.5));
  Tensor four = Tensor::from_vector_f64({0, 2, 4, 6}, {1, 1, 1, 4});
  EXPECT_EQ(F::upsample_bilinear2d(four, 1, 2, false).to_vector_f64(), (std::vector<double>{1, 5}));
}

// The kernels overwrite garbage, give the same bits at 1 and 2 threads, take blocked input, and
// the backward is the forward's transpose: <up(x), g> = <x, up^T(g)>.
TEST(UpsampleBilinear2d, OverwritesThreadIndependentBlockedAndAdjoint) {
  Rng rng(5);
  for (bool align : {false, true}) {
    Tensor x = randn({2, 16, 9, 7}, rng, DType::kFloat32);
    Tensor g = randn({2, 16, 20, 15}, rng, DType::kFloat32);
    Tensor y1 = Tensor::full({2, 16, 20, 15}, NAN), y2 = Tensor::full({2, 16, 20, 15}, NAN);
    Tensor d1 = Tensor::full(x.shape(), NAN), d2 = Tensor::full(x.shape(), NAN);
    {
      Threads t(1);
      ops::upsample_bilinear2d_forward(x, y1, align);
      ops::upsample_bilinear2d_backward(g, d1, align);
    }
    {
      Threads t(2);
      ops::upsample_bilinear2d_forward(x, y2, align);
      ops::upsample_bilinear2d_backward(g, d2, align);
    }
    EXPECT_TRUE(same_bytes(y1, y2));
    EXPECT_TRUE(same_bytes(d1, d2));
    EXPECT_TRUE(
        same_bytes(F::upsample_bilinear2d(x.to_layout(Layout::kBlocked16), 20, 15, align), y1));
    double lhs = 0, rhs = 0;
    auto yv = y1.to_vector_f64(), gv = g.to_vector_f64(), xv = x.to_vector_f64(),
         dv = d1.to_vector_f64();
    for (size_t i = 0; i < yv.size(); ++i) lhs += yv[i] * gv[i];
    for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * dv[i];
    EXPECT_NEAR(lhs, rhs, 1e-3 * std::abs(lhs) + 1e-3) << align;
  }
  EXPECT_TRUE(input_error(
      [] {
        F::upsample_bilinear2d(Tensor::zeros({2, 3}), 4, 4);
      },
      "(N, C, H, W)"));
  EXPECT_TRUE(input_error(
      [] {
        F::upsample_bilinear2d(Tensor::zeros({1, 1, 2, 2}), 0, 4);
      },
      "sizes must be >= 1"));
}

// ---- conv_transpose2d ----

// conv_transpose2d is conv2d's input gradient: <conv(x, w), y> = <x, conv_transpose(y, w)>, its
// output size is torch's, a blocked input gives the same result, and bad shapes are InputErrors.
TEST(ConvTranspose2d, IsTheAdjointOfConv2dWithTorchsOutputSize) {
  Rng rng(6);
  Tensor w = randn({16, 8, 3, 3}, rng, DType::kFloat64);  // conv: 8 -> 16; transposed: 16 -> 8
  Tensor x = randn({2, 8, 11, 10}, rng, DType::kFloat64);
  Tensor cx = F::conv2d(x, w, Tensor(), 2, 1);  // (2, 16, 6, 5)
  Tensor y = randn(cx.shape(), rng, DType::kFloat64);
  Tensor ty = F::conv_transpose2d(y, w, Tensor(), 2, 1, 0);  // (2, 8, 11, 9)
  EXPECT_EQ(ty.shape(), (Shape{2, 8, 11, 9}));
  EXPECT_EQ(F::conv_transpose2d(y, w, Tensor(), 2, 1, 1).shape(), (Shape{2, 8, 12, 10}));
  Tensor ty1 = F::conv_transpose2d(y, w, Tensor(), 2, 1, 1);
  auto a = cx.to_vector_f64(), yv = y.to_vector_f64(), b = ty1.to_vector_f64();
  // x has 11 x 10 pixels: the output_padding 1 result (12 x 10) covers x's rows 0..10 and more.
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < a.size(); ++i) lhs += a[i] * yv[i];
  auto xv = x.to_vector_f64();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 8; ++c)
      for (int64_t i = 0; i < 11; ++i)
        for (int64_t j = 0; j < 10; ++j)
          rhs += xv[((n * 8 + c) * 11 + i) * 10 + j] * b[((n * 8 + c) * 12 + i) * 10 + j];
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::abs(lhs));
  Tensor b8 = randn({8}, rng, DType::kFloat32);
  Tensor wf = w.to(DType::kFloat32), yf = randn({2, 16, 6, 5}, rng, DType::kFloat32);
  EXPECT_TRUE(same_bytes(F::conv_transpose2d(yf.to_layout(Layout::kBlocked16), wf, b8, 2, 1, 1),
                         F::conv_transpose2d(yf, wf, b8, 2, 1, 1)));
  EXPECT_TRUE(
      input_error([&] { F::conv_transpose2d(yf, wf.to(DType::kFloat32), Tensor(), 2, 1, 2); },
                  "output_padding 2 must be smaller than stride 2"));
  EXPECT_TRUE(input_error([&] { F::conv_transpose2d(x.to(DType::kFloat32), wf, Tensor()); },
                          "must be (in_channels, out_channels, kH, kW)"));
}

// ---- dice_loss ----

// Two pixels, two classes, no ignore: p = softmax, dice_c = 2 I_c / (P_c + T_c), the loss the
// mean of 1 - dice_c; an absent class adds 0; every pixel ignored gives 0 and a zero gradient.
TEST(DiceLoss, HandValueAbsentClassAndAllIgnored) {
  Tensor x = Tensor::from_vector_f64({1.0, -0.5, 0.0, 2.0}, {1, 2, 1, 2});  // logits (1, 2, 1, 2)
  Tensor t = labels({0, 1}, {1, 1, 2});
  const double p00 = 1 / (1 + std::exp(-1.0)), p01 = 1 / (1 + std::exp(2.5));  // class 0
  // class 0: I = p00, P = p00 + p01, T = 1;  class 1: I = 1 - p01, P = 2 - p00 - p01, T = 1
  const double d0 = 2 * p00 / (p00 + p01 + 1), d1 = 2 * (1 - p01) / (3 - p00 - p01);
  EXPECT_NEAR(F::dice_loss(x, t).item(), ((1 - d0) + (1 - d1)) / 2, 1e-12);
  Tensor only0 = labels({0, 0}, {1, 1, 2});
  const double e0 = 2 * (p00 + p01) / (p00 + p01 + 2);
  EXPECT_NEAR(F::dice_loss(x, only0).item(), (1 - e0) / 2, 1e-12);  // class 1 absent: 0
  Tensor xi = x.clone();
  xi.set_requires_grad(true);
  Tensor l = F::dice_loss(xi, labels({255, 255}, {1, 1, 2}));
  EXPECT_EQ(l.item(), 0.0);
  l.backward();
  for (double v : xi.grad().to_vector_f64()) EXPECT_EQ(v, 0.0);
  EXPECT_TRUE(input_error(
      [&] {
        F::dice_loss(x, labels({0, 7}, {1, 1, 2}));
      },
      "dice_loss: label 7 at pixel"));
  EXPECT_TRUE(input_error(
      [&] {
        F::dice_loss(x, labels({0, 1, 0}, {1, 1, 3}));
      },
      "dice_loss: target must be (N, H, W)"));
}
