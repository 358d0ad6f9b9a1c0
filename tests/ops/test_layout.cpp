// Layout::kBlocked16 (nChw16c) against row-major: conversions round-trip, and every layout-aware
// op (conv2d forward/backward, batch_norm with residual and relu, relu, add) gives the same numbers
// from a blocked input as from the same values row-major.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "test_util.h"

using namespace hpcnet;
using hpcnet::test_util::max_abs;

namespace {
Tensor randn(const Shape& s, uint64_t seed) {
  Rng r(seed);
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(r.normal());
  return t;
}
void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], tol) << what << " at " << i;
}
// Each got[i] against want[i] within rel * max|want[i]| + atol; what(i) names it in messages.
void expect_close_to_scale(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                           double rel, double atol,
                           const std::function<std::string(size_t)>& what) {
  for (size_t i = 0; i < want.size(); ++i)
    expect_close(got[i], want[i], rel * max_abs(want[i]) + atol, what(i));
}
}  // namespace

TEST(Layout, BlockedRoundTripsAndIsNotContiguous) {
  Tensor x = randn({2, 32, 3, 5}, 1);
  Tensor b = x.to_layout(Layout::kBlocked16);
  EXPECT_EQ(b.layout(), Layout::kBlocked16);
  EXPECT_FALSE(b.is_contiguous());
  EXPECT_TRUE(b.is_dense());
  // Element (n=1, c=17, h=2, w=4) sits at ((1 * 2 + 1) * 15 + 2 * 5 + 4) * 16 + 1.
  EXPECT_EQ(b.data<float>()[((1 * 2 + 1) * 15 + 14) * 16 + 1],
            x.data<float>()[((1 * 32 + 17) * 3 + 2) * 5 + 4]);
  EXPECT_EQ(b.to_vector(), x.to_vector());
  EXPECT_EQ(b.contiguous().to_vector(), x.to_vector());
  EXPECT_EQ(b.clone().layout(), Layout::kStrided);
  Tensor c = Tensor::empty_layout(x.shape(), DType::kFloat32, cpu_device(), Layout::kBlocked16);
  c.copy_(x);
  EXPECT_EQ(c.to_vector(), x.to_vector());
  EXPECT_THROW(
      Tensor::empty_layout({2, 3, 4, 4}, DType::kFloat32, cpu_device(), Layout::kBlocked16), Error);
}

TEST(Layout, LayoutAwareOpsMatchRowMajor) {
  for (bool training : {true, false}) {
    Tensor x = randn({3, 16, 6, 5}, 2), w = randn({32, 16, 3, 3}, 3), w2 = randn({32, 32, 3, 3}, 4);
    Tensor gamma = randn({32}, 5), beta = randn({32}, 6), res = randn({3, 32, 6, 5}, 7);
    Tensor rm = Tensor::zeros({32}), rv = Tensor::full({32}, 1.0);
    auto run = [&](bool blocked) {
      Tensor xi = (blocked ? x.to_layout(Layout::kBlocked16) : x.clone()).set_requires_grad(true);
      Tensor wi = w.clone().set_requires_grad(true), w2i = w2.clone().set_requires_grad(true);
      Tensor gi = gamma.clone().set_requires_grad(true), bi = beta.clone().set_requires_grad(true);
      Tensor ri = blocked ? res.to_layout(Layout::kBlocked16) : res;
      Tensor m = rm.clone(), v = rv.clone();
      Tensor h = F::conv2d(xi, wi, Tensor(), 1, 1);
      h = F::batch_norm_act(h, gi, bi, m, v, training, 0.1, 1e-5, ri, true);
      h = F::relu(F::add(h, F::conv2d(h, w2i, Tensor(), 1, 1)));
      Tensor loss = F::sum(F::global_avg_pool2d(h));
      loss.backward();
      return std::vector<Tensor>{h, xi.grad(), wi.grad(), w2i.grad(), gi.grad(), bi.grad(), m, v};
    };
    auto a = run(false), b = run(true);
    const char* names[] = {"y",      "dx",    "dw",           "dw2",
                           "dgamma", "dbeta", "running_mean", "running_var"};
    for (size_t i = 0; i < a.size(); ++i) expect_close(b[i], a[i], 2e-3, names[i]);
  }
}

TEST(Layout, BlockedBatchNormMatchesRowMajorTightly) {
  for (Shape shape : {Shape{4, 32, 16, 16}, Shape{4, 16, 32, 32}, Shape{32, 16, 32, 32}})
    for (bool training : {true, false}) {
      const int64_t C = shape[1];
      Tensor x = randn(shape, 12), gamma = randn({C}, 13), beta = randn({C}, 14);
      Tensor res = randn(shape, 15), dy = randn(shape, 16);
      auto run = [&](bool blocked) {
        Tensor xi = (blocked ? x.to_layout(Layout::kBlocked16) : x.clone()).set_requires_grad(true);
        Tensor gi = gamma.clone().set_requires_grad(true),
               bi = beta.clone().set_requires_grad(true);
        Tensor ri =
            (blocked ? res.to_layout(Layout::kBlocked16) : res.clone()).set_requires_grad(true);
        Tensor m = Tensor::zeros({C}), v = Tensor::full({C}, 1.0);
        Tensor y = F::batch_norm_act(xi, gi, bi, m, v, training, 0.1, 1e-5, ri, true);
        y.backward(blocked ? dy.to_layout(Layout::kBlocked16) : dy);
        return std::vector<Tensor>{y, xi.grad(), gi.grad(), bi.grad(), ri.grad(), m, v};
      };
      auto a = run(false), b = run(true);
      const char* names[] = {"y", "dx", "dgamma", "dbeta", "dres", "running_mean", "running_var"};
      expect_close_to_scale(b, a, 2e-5, 1e-7, [&](size_t i) {
        return std::string(names[i]) + (training ? " train " : " eval ") + shape_str(shape);
      });
    }
}

TEST(Layout, BlockedConvolutionsMatchRowMajorTightly) {
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  for (const Case& c :
       {Case{{4, 16, 32, 32}, {32, 16, 3, 3}, 2, 1}, Case{{4, 16, 32, 32}, {16, 16, 3, 3}, 1, 1},
        Case{{3, 32, 9, 9}, {64, 32, 3, 3}, 2, 1}}) {
    Tensor x = randn(c.x, 21), w = randn(c.w, 22);
    Shape ys{c.x[0], c.w[0], (c.x[2] + 2 * c.pad - 3) / c.stride + 1,
             (c.x[3] + 2 * c.pad - 3) / c.stride + 1};
    Tensor dy = randn(ys, 23);
    auto run = [&](bool blocked) {
      Tensor xi = (blocked ? x.to_layout(Layout::kBlocked16) : x.clone()).set_requires_grad(true);
      Tensor wi = w.clone().set_requires_grad(true);
      Tensor y = F::conv2d(xi, wi, Tensor(), c.stride, c.pad);
      y.backward(blocked ? dy.to_layout(Layout::kBlocked16) : dy);
      return std::vector<Tensor>{y, xi.grad(), wi.grad()};
    };
    auto a = run(false), b = run(true);
    const char* names[] = {"y", "dx", "dw"};
    expect_close_to_scale(b, a, 2e-5, 0, [&](size_t i) {
      return std::string(names[i]) + " " + shape_str(c.x) + " s" + std::to_string(c.stride);
    });
  }
}

TEST(Layout, DownsamplingBlockGradientsMatchRowMajorTightly) {
  Tensor x = randn({4, 16, 32, 32}, 31), w = randn({32, 16, 3, 3}, 32),
         dy = randn({4, 32, 16, 16}, 33);
  Tensor gamma = randn({32}, 34), beta = randn({32}, 35);
  auto run = [&](bool blocked) {
    Tensor xi = (blocked ? x.to_layout(Layout::kBlocked16) : x.clone()).set_requires_grad(true);
    Tensor wi = w.clone().set_requires_grad(true);
    Tensor h = F::batch_norm_act(xi, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                                 Tensor(), true);
    Tensor y1 = F::conv2d(h, wi, Tensor(), 2, 1);
    Tensor y2 = F::subsample_pad(h, 2, 8);
    Tensor z = F::batch_norm_act(y1, gamma, beta, Tensor(), Tensor(), true, 0.1, 1e-5, y2, true);
    z.backward(dy);
    return std::vector<Tensor>{z, xi.grad(), wi.grad()};
  };
  auto a = run(false), b = run(true);
  const char* names[] = {"z", "dx", "dw"};
  expect_close_to_scale(b, a, 2e-5, 0, [&](size_t i) { return std::string(names[i]); });
}

// The first block of a CIFAR ResNet: a row-major input (the stem's output) feeds a convolution
// that answers in blocked layout and, as the residual, the block's last batch norm; gradients
// meet in both layouts. float32 (blocked inside) against the same chain in float64 (row-major).
TEST(Layout, MixedLayoutBlockMatchesFloat64) {
  Tensor x = randn({4, 16, 32, 32}, 41), w1 = randn({16, 16, 3, 3}, 42),
         w2 = randn({16, 16, 3, 3}, 43);
  Tensor dy = randn({4, 16, 32, 32}, 44);
  auto run = [&](DType t) {
    Tensor xi = x.to(t).set_requires_grad(true);
    Tensor a = w1.to(t).set_requires_grad(true), b = w2.to(t).set_requires_grad(true);
    Tensor stem = F::batch_norm_act(xi, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                                    Tensor(), true);
    Tensor h = F::batch_norm_act(F::conv2d(stem, a, Tensor(), 1, 1), Tensor(), Tensor(), Tensor(),
                                 Tensor(), true, 0.1, 1e-5, Tensor(), true);
    Tensor z = F::batch_norm_act(F::conv2d(h, b, Tensor(), 1, 1), Tensor(), Tensor(), Tensor(),
                                 Tensor(), true, 0.1, 1e-5, stem, true);
    z.backward(dy.to(t));
    return std::vector<Tensor>{z, xi.grad(), a.grad(), b.grad()};
  };
  auto f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  const char* names[] = {"z", "dx", "dw1", "dw2"};
  expect_close_to_scale(f32, f64, 2e-5, 0, [&](size_t i) { return std::string(names[i]); });
}

// Three identity-shortcut blocks after a row-major stem (ResNet stage 1): every block input after
// the first is blocked and feeds both a convolution and the block's residual.
TEST(Layout, ChainedResidualBlocksMatchFloat64) {
  Tensor x = randn({4, 16, 32, 32}, 51), dy = randn({4, 16, 32, 32}, 52);
  std::vector<Tensor> ws;
  for (int i = 0; i < 6; ++i) ws.push_back(randn({16, 16, 3, 3}, 60 + i));
  auto run = [&](DType t) {
    Tensor xi = x.to(t).set_requires_grad(true);
    std::vector<Tensor> w;
    for (auto& v : ws) w.push_back(v.to(t).set_requires_grad(true));
    auto bn = [&](const Tensor& h, const Tensor& res) {
      return F::batch_norm_act(h, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, res,
                               true);
    };
    Tensor h = bn(xi, Tensor());
    for (int b = 0; b < 3; ++b) {
      Tensor o = bn(F::conv2d(h, w[2 * b], Tensor(), 1, 1), Tensor());
      h = bn(F::conv2d(o, w[2 * b + 1], Tensor(), 1, 1), h);
    }
    h.backward(dy.to(t));
    std::vector<Tensor> out{h, xi.grad()};
    for (auto& v : w) out.push_back(v.grad());
    return out;
  };
  auto f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  expect_close_to_scale(f32, f64, 2e-5, 0, [](size_t i) { return "output " + std::to_string(i); });
}

// cat along the channels of blocked tensors and narrow of whole 16-channel blocks keep the blocked
// layout (C2f's chunk and concatenation without a reorder); the values and the gradients are
// those of the row-major ops, exactly (both are copies). A piece that is not whole blocks, or a
// row-major input among blocked ones, goes row-major as before.
TEST(Layout, CatAndNarrowOfWholeBlocksStayBlocked) {
  Tensor a = randn({2, 32, 3, 5}, 21), b = randn({2, 16, 3, 5}, 22), c = randn({2, 48, 3, 5}, 23);
  Tensor up = randn({2, 96, 3, 5}, 24);  // the gradient given to cat's output
  auto run = [&](bool blocked, std::vector<Tensor>& grads) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {a, b, c}) {
      Tensor l = blocked ? t.to_layout(Layout::kBlocked16) : t.clone();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    // y = cat(a, narrow(c, 16, 32), b, narrow(c, 0, 16)): channels 32 + 32 + 16 + 16 = 96
    Tensor y = F::cat(
        {leaves[0], F::narrow(leaves[2], 1, 16, 32), leaves[1], F::narrow(leaves[2], 1, 0, 16)}, 1);
    y.backward(blocked ? up.to_layout(Layout::kBlocked16) : up);  // a blocked gradient into cat
    for (auto& l : leaves) grads.push_back(l.grad());
    return y;
  };
  std::vector<Tensor> gb, gp;
  Tensor yb = run(true, gb), yp = run(false, gp);
  EXPECT_EQ(yb.layout(), Layout::kBlocked16);
  EXPECT_EQ(yp.layout(), Layout::kStrided);
  EXPECT_EQ(yb.to_vector(), yp.to_vector());
  for (size_t i = 0; i < gb.size(); ++i) {
    EXPECT_EQ(gb[i].to_vector(), gp[i].to_vector()) << "gradient " << i;
    EXPECT_EQ(gb[i].layout(), Layout::kBlocked16) << "gradient " << i;
  }
  // Not whole blocks, or mixed layouts: row-major, the same values.
  Tensor cb = c.to_layout(Layout::kBlocked16);
  Tensor part = F::narrow(cb, 1, 8, 16);
  EXPECT_EQ(part.layout(), Layout::kStrided);
  EXPECT_EQ(part.to_vector(), F::narrow(c, 1, 8, 16).to_vector());
  Tensor mixed = F::cat({cb, b}, 1);
  EXPECT_EQ(mixed.layout(), Layout::kStrided);
  EXPECT_EQ(mixed.to_vector(), F::cat({c, b}, 1).to_vector());
}

// A narrow whose slice is one run of the input's memory is a view of it, without a copy: along
// dim 0 (row-major), and along the channels of a batch of one image, row-major or whole blocks of
// a blocked tensor (C2f's chunk at predict time). Its values and gradient are those of the copy;
// a channel slice of a batch of two is a copy.
TEST(Layout, NarrowOfOneRunOfMemoryIsAView) {
  struct Case {
    Shape shape;
    bool blocked;
    int64_t dim, start, length;
    bool view;
  };
  const std::vector<Case> cases = {
      {{1, 48, 3, 5}, false, 1, 16, 32, true}, {{1, 48, 3, 5}, true, 1, 16, 32, true},
      {{1, 48, 3, 5}, false, 1, 5, 7, true},   {{4, 16, 3, 5}, false, 0, 1, 2, true},
      {{4, 6, 3, 5}, false, 0, 2, 2, true},    {{2, 48, 3, 5}, false, 1, 16, 32, false},
      {{2, 48, 3, 5}, true, 1, 16, 32, false}, {{1, 48, 3, 5}, false, 2, 1, 2, false},
  };
  for (const Case& c : cases) {
    const std::string tag = shape_str(c.shape) + (c.blocked ? " blocked" : "") + " dim " +
                            std::to_string(c.dim) + " start " + std::to_string(c.start);
    Tensor x = randn(c.shape, 51);
    Tensor up_shape_probe = F::narrow(x, c.dim, c.start, c.length);
    Tensor up = randn(up_shape_probe.shape(), 52);
    Tensor l = c.blocked ? x.to_layout(Layout::kBlocked16) : x.clone();
    l.set_requires_grad(true);
    Tensor y = F::narrow(l, c.dim, c.start, c.length);
    EXPECT_EQ(
        y.raw_data() >= l.raw_data() && static_cast<const char*>(y.raw_data()) <
                                            static_cast<const char*>(l.raw_data()) + l.nbytes(),
        c.view)
        << tag;
    if (c.view) EXPECT_EQ(y.layout(), l.layout()) << tag;
    EXPECT_EQ(y.to_vector(), up_shape_probe.to_vector()) << tag;
    y.backward(y.layout() == Layout::kBlocked16 ? up.to_layout(Layout::kBlocked16) : up);
    // The gradient: up inside the slice, zero outside (row-major index arithmetic).
    std::vector<float> want(x.numel(), 0.0f);
    const std::vector<float> u = up.to_vector();
    int64_t inner = 1;
    for (size_t d = c.dim + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t outer = i / (inner * c.shape[c.dim]), k = i / inner % c.shape[c.dim];
      if (k >= c.start && k < c.start + c.length)
        want[i] = u[(outer * c.length + k - c.start) * inner + i % inner];
    }
    EXPECT_EQ(l.grad().contiguous().to_vector(), want) << tag;
  }
}

// Nearest upsampling keeps a blocked input blocked (YOLO's head and the U-Net decoder feed it
// into a concatenation): values and gradients equal the row-major op's.
TEST(Layout, NearestUpsamplingOfABlockedTensorStaysBlocked) {
  for (int64_t scale : {1, 2, 3}) {
    Tensor x = randn({2, 32, 3, 4}, 31 + scale);
    Tensor up = randn({2, 32, 3 * scale, 4 * scale}, 41 + scale);
    auto run = [&](bool blocked, Tensor& grad) {
      Tensor l = blocked ? x.to_layout(Layout::kBlocked16) : x.clone();
      l.set_requires_grad(true);
      Tensor y = F::upsample_nearest2d(l, scale);
      y.backward(blocked ? up.to_layout(Layout::kBlocked16) : up);
      grad = l.grad();
      return y;
    };
    Tensor gb, gp;
    Tensor yb = run(true, gb), yp = run(false, gp);
    const std::string tag = "scale " + std::to_string(scale);
    EXPECT_EQ(yb.layout(), Layout::kBlocked16) << tag;
    EXPECT_EQ(gb.layout(), Layout::kBlocked16) << tag;
    EXPECT_EQ(yb.to_vector(), yp.to_vector()) << tag;
    expect_close(gb, gp, 1e-6, tag + " gradient");  // sums of scale^2 values, in another order
  }
}
