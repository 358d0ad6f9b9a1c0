// The ops YOLO11 adds (softmax and bmm for its Attention, depthwise_conv2d for its DWConv):
// their float32 CPU kernels (the vectorised softmax paths, oneDNN's matmul with transposes as
// strides, the depthwise loops) against the float64 ones on the same inputs, forward and
// backward, with outputs pre-filled with NaN to prove the kernels overwrite them (tolerance
// |f32 - f64| <= 1e-4 (1 + |f64|)); softmax's stability for large logits; bmm of views; and
// nn::Conv2d's groups (depthwise: torch's weight shape and init bound, state_dict and
// safetensors round trip, other groups refused).
#include <gtest/gtest.h>

#include <cmath>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"
#include "test_util.h"

using namespace hpcnet;

namespace {

Tensor randn(const Shape& s, Rng& rng, double scale = 1.0) {
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * scale;
  return t;
}

// Outputs pre-filled with NaN (an element a kernel never writes fails the comparison); a float32
// result within 1e-4 (1 + |float64 reference|) elementwise: the op checks' helpers.
using ops::case_checks::nan_cpu;
void expect_close(const Tensor& f32, const Tensor& f64, const std::string& what) {
  ops::case_checks::expect_near_all(f32, f64, 1e-4, 1e-4, what);
}

// Both dtypes of one float64 tensor.
struct Pair {
  Tensor d, f;
  explicit Pair(const Tensor& t) : d(t), f(t.to(DType::kFloat32)) {}
};

}  // namespace

// The last dim (16-lane rows, with a tail), a middle dim with more lines than one block (256)
// and dim 0; forward from logits up to +-12, backward from the float64 output.
TEST(Yolo11Ops, SoftmaxFloat32KernelsMatchFloat64) {
  Rng rng(31);
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{8, 4, 256}, 2}, {{3, 37}, 1}, {{2, 5, 300}, 1}, {{6, 3, 2}, 0}, {{1, 1}, 1}};
  for (const auto& [shape, dim] : cases) {
    const std::string what = shape_str(shape) + " dim " + std::to_string(dim);
    Pair x(randn(shape, rng, 4.0)), dy(randn(shape, rng));
    Tensor yd = nan_cpu(shape, DType::kFloat64), yf = nan_cpu(shape, DType::kFloat32);
    ops::softmax_forward(x.d, yd, dim);
    ops::softmax_forward(x.f, yf, dim);
    expect_close(yf, yd, what + " forward");
    Tensor dxd = nan_cpu(shape, DType::kFloat64), dxf = nan_cpu(shape, DType::kFloat32);
    ops::softmax_backward(dy.d, yd, dxd, dim);
    ops::softmax_backward(dy.f, yd.to(DType::kFloat32), dxf, dim);
    expect_close(dxf, dxd, what + " backward");
    // Every line sums to 1.
    const int64_t n = shape[static_cast<size_t>(dim)];
    EXPECT_NEAR(F::sum(yd).item(), static_cast<double>(yd.numel() / n), 1e-12) << what;
  }
}

// The maximum is subtracted first: logits near 1000 give the probabilities of the same logits
// shifted to 0, not NaN (e^1000 overflows in float64, e^89 in float32).
TEST(Yolo11Ops, SoftmaxIsStableForLargeLogits) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = Tensor::from_vector_f64({1000, 1001, 999, 1000.5, -1000, 1002}, {2, 3}).to(t);
    Tensor shifted = Tensor::from_vector_f64({0, 1, -1, 0.5, -2000, 2}, {2, 3}).to(t);
    expect_close(F::softmax(x, -1).to(DType::kFloat64), F::softmax(shifted, -1).to(DType::kFloat64),
                 std::string("large logits ") + dtype_name(t));
  }
}

// The four transpose combinations at YOLO11-like sizes (oneDNN's matmul in float32), the
// backward products included (through F::bmm's autograd node).
TEST(Yolo11Ops, BmmFloat32MatchesFloat64WithEveryTranspose) {
  Rng rng(32);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t B = 8, M = 33, K = 32, N = 65;
      const Shape sa = ta ? Shape{B, K, M} : Shape{B, M, K};
      const Shape sb = tb ? Shape{B, N, K} : Shape{B, K, N};
      const std::string what =
          std::string("bmm ta ") + (ta ? "1" : "0") + " tb " + (tb ? "1" : "0");
      Pair a(randn(sa, rng)), b(randn(sb, rng));
      Tensor cd = nan_cpu({B, M, N}, DType::kFloat64), cf = nan_cpu({B, M, N}, DType::kFloat32);
      ops::bmm(a.d, b.d, cd, ta, tb);
      ops::bmm(a.f, b.f, cf, ta, tb);
      expect_close(cf, cd, what);
      Pair dc(randn({B, M, N}, rng));
      std::vector<Tensor> grads[2];
      for (int k = 0; k < 2; ++k) {
        Tensor x = (k ? a.f : a.d).clone().set_requires_grad(true);
        Tensor y = (k ? b.f : b.d).clone().set_requires_grad(true);
        F::bmm(x, y, ta, tb).backward(k ? dc.f : dc.d);
        grads[k] = {x.grad(), y.grad()};
      }
      expect_close(grads[1][0], grads[0][0], what + " da");
      expect_close(grads[1][1], grads[0][1], what + " db");
    }
}

// The float64 reference loops themselves, on a hand-computed product: [[1, 2], [3, 4]] times
// [[5, 6], [7, 8]] and its transposes.
TEST(Yolo11Ops, BmmMatchesAHandComputedProduct) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = Tensor::from_vector_f64({1, 2, 3, 4}, {1, 2, 2}).to(t);
    Tensor b = Tensor::from_vector_f64({5, 6, 7, 8}, {1, 2, 2}).to(t);
    EXPECT_EQ(F::bmm(a, b).to_vector_f64(), (std::vector<double>{19, 22, 43, 50}));
    EXPECT_EQ(F::bmm(a, b, true, false).to_vector_f64(), (std::vector<double>{26, 30, 38, 44}));
    EXPECT_EQ(F::bmm(a, b, false, true).to_vector_f64(), (std::vector<double>{17, 23, 39, 53}));
    EXPECT_EQ(F::bmm(a, b, true, true).to_vector_f64(), (std::vector<double>{23, 31, 34, 46}));
  }
}

// Operands that are views (a narrow of a reshape, as YOLO11 splits q, k and v out of one qkv
// tensor) give the product of their copies.
TEST(Yolo11Ops, BmmOfViewsEqualsBmmOfCopies) {
  Rng rng(33);
  Tensor qkv = randn({2, 3 * 4, 5}, rng).to(DType::kFloat32);
  Tensor flat = F::reshape(qkv, {2 * 3, 4, 5});  // (B heads, key_dim, N)
  Tensor q = F::narrow(flat, 0, 1, 4), k = F::narrow(flat, 0, 2, 4);
  expect_close(F::bmm(q, k, true, false),
               F::bmm(q.clone(), k.clone(), true, false).to(DType::kFloat64), "views");
}

// Stride 1 and 2, padding, dilation, a non-square filter; the weight and bias gradients as
// well (channel-parallel sums).
TEST(Yolo11Ops, DepthwiseConv2dFloat32KernelsMatchFloat64) {
  Rng rng(34);
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
  };
  const std::vector<Case> cases = {{{2, 16, 12, 12}, {16, 1, 3, 3}, {1, 1, 1, 1, 1, 1}, true},
                                   {{2, 5, 11, 9}, {5, 1, 3, 3}, {2, 2, 1, 1, 1, 1}, false},
                                   {{1, 3, 10, 13}, {3, 1, 5, 3}, {1, 1, 2, 2, 2, 2}, true},
                                   {{3, 4, 7, 7}, {4, 1, 2, 2}, {3, 3, 0, 0, 1, 1}, true}};
  for (const Case& c : cases) {
    const std::string what =
        shape_str(c.x) + " * " + shape_str(c.w) + " stride " + std::to_string(c.p.stride_h);
    Pair x(randn(c.x, rng)), w(randn(c.w, rng)), b(randn({c.w[0]}, rng));
    const Shape ys = {c.x[0], c.x[1],
                      ops::conv_out_size(c.x[2], c.w[2], c.p.stride_h, c.p.pad_h, c.p.dil_h),
                      ops::conv_out_size(c.x[3], c.w[3], c.p.stride_w, c.p.pad_w, c.p.dil_w)};
    Tensor yd = nan_cpu(ys, DType::kFloat64), yf = nan_cpu(ys, DType::kFloat32);
    ops::depthwise_conv2d_forward(x.d, w.d, c.bias ? b.d : Tensor(), yd, c.p);
    ops::depthwise_conv2d_forward(x.f, w.f, c.bias ? b.f : Tensor(), yf, c.p);
    expect_close(yf, yd, what + " forward");
    Pair dy(randn(ys, rng));
    Tensor dxd = nan_cpu(c.x, DType::kFloat64), dxf = nan_cpu(c.x, DType::kFloat32);
    ops::depthwise_conv2d_backward_data(dy.d, w.d, dxd, c.p);
    ops::depthwise_conv2d_backward_data(dy.f, w.f, dxf, c.p);
    expect_close(dxf, dxd, what + " dx");
    Tensor dwd = nan_cpu(c.w, DType::kFloat64), dwf = nan_cpu(c.w, DType::kFloat32);
    Tensor dbd = c.bias ? nan_cpu({c.w[0]}, DType::kFloat64) : Tensor();
    Tensor dbf = c.bias ? nan_cpu({c.w[0]}, DType::kFloat32) : Tensor();
    ops::depthwise_conv2d_backward_weights(x.d, dy.d, dwd, dbd, c.p);
    ops::depthwise_conv2d_backward_weights(x.f, dy.f, dwf, dbf, c.p);
    expect_close(dwf, dwd, what + " dw");
    if (c.bias) expect_close(dbf, dbd, what + " db");
  }
}

// A depthwise convolution equals the ordinary one with a block-diagonal (C, C, R, S) weight.
TEST(Yolo11Ops, DepthwiseConv2dEqualsConv2dWithABlockDiagonalWeight) {
  Rng rng(35);
  Tensor x = randn({2, 4, 9, 8}, rng), w = randn({4, 1, 3, 3}, rng), b = randn({4}, rng);
  Tensor full = Tensor::zeros({4, 4, 3, 3}, DType::kFloat64);
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t t = 0; t < 9; ++t)
      full.data<double>()[(c * 4 + c) * 9 + t] = w.data<double>()[c * 9 + t];
  for (int64_t stride : {1, 2}) {
    const std::vector<double> got = F::depthwise_conv2d(x, w, b, stride, 2, 2).to_vector_f64();
    const std::vector<double> want = F::conv2d(x, full, b, stride, 2, 2).to_vector_f64();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << i;
  }
}

// torch.nn.Conv2d(C, C, k, groups=C): weight (C, 1, k, k), uniform in +-1/sqrt(k k) (fan_in =
// in / groups k k); forward is the depthwise op.
TEST(Yolo11Ops, Conv2dWithGroupsIsDepthwise) {
  manual_seed(5);
  nn::Conv2d conv(8, 8, 3, 2, 1, true, 1, 8);
  ASSERT_EQ(conv.weight.shape(), (Shape{8, 1, 3, 3}));
  ASSERT_EQ(conv.bias.shape(), (Shape{8}));
  EXPECT_EQ(conv.groups, 8);
  const double bound = 1.0 / 3.0;
  double largest = 0;
  for (float v : conv.weight.to_vector())
    largest = std::max(largest, static_cast<double>(std::abs(v)));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8 * bound);  // drawn from +-1/3, not from +-1/sqrt(8 * 9)
  Rng rng(36);
  Tensor x = randn({2, 8, 7, 7}, rng).to(DType::kFloat32);
  expect_close(conv.forward(x),
               F::depthwise_conv2d(x, conv.weight, conv.bias, 2, 1).to(DType::kFloat64), "forward");
  EXPECT_EQ(conv.forward(x).shape(), (Shape{2, 8, 4, 4}));
}

TEST(Yolo11Ops, Conv2dRefusesGroupsOtherThanOneOrDepthwise) {
  for (auto [in, out, groups] : {std::tuple{8, 8, 2}, {8, 16, 8}, {4, 4, 0}}) {
    try {
      nn::Conv2d conv(in, out, 3, 1, 1, true, 1, groups);
      ADD_FAILURE() << "groups " << groups << " accepted";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("only groups 1 and depthwise"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

// The (C, 1, k, k) weight goes through state_dict, a safetensors file and load_state_dict.
TEST(Yolo11Ops, DepthwiseConv2dStateDictRoundTripsThroughSafetensors) {
  test_util::TempDir dir("dwconv");
  nn::Conv2d a(6, 6, 3, 1, 1, true, 1, 6), b(6, 6, 3, 1, 1, true, 1, 6);
  const nn::NamedTensors sd = a.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "weight");
  EXPECT_EQ(sd[0].second.shape(), (Shape{6, 1, 3, 3}));
  const std::string file = (dir.path() / "dw.safetensors").string();
  save_safetensors(file, sd);
  const SafetensorsFile f = load_safetensors(file);
  EXPECT_EQ(f.at("weight").shape(), (Shape{6, 1, 3, 3}));
  b.load_state_dict(f.tensors);
  EXPECT_EQ(b.weight.to_vector(), a.weight.to_vector());
  EXPECT_EQ(b.bias.to_vector(), a.bias.to_vector());
  // A full (6, 6, 3, 3) weight does not load into the depthwise module.
  std::map<std::string, Tensor> wrong = f.tensors;
  wrong["weight"] = Tensor::zeros({6, 6, 3, 3});
  EXPECT_THROW(b.load_state_dict(wrong), Error);
}

// Activations that a convolution left blocked (nChw16c) are read as their row-major values.
TEST(Yolo11Ops, BlockedInputsGiveTheRowMajorResult) {
  Rng rng(37);
  Tensor x = randn({2, 16, 6, 5}, rng).to(DType::kFloat32);
  Tensor blocked = x.to_layout(Layout::kBlocked16);
  ASSERT_EQ(blocked.layout(), Layout::kBlocked16);
  Tensor w = randn({16, 1, 3, 3}, rng).to(DType::kFloat32);
  EXPECT_EQ(F::depthwise_conv2d(blocked, w, Tensor(), 1, 1).to_vector(),
            F::depthwise_conv2d(x, w, Tensor(), 1, 1).to_vector());
  EXPECT_EQ(F::softmax(blocked, 1).to_vector(), F::softmax(x, 1).to_vector());
}
