// Tests of int8 inference convolutions (Conv2dParams::int8_scale, `hpcnet quantize`): the output
// against float32 within int8's quantisation error, with the bias, the fused activations, blocked
// layouts and strides; the same numbers as quantising by hand and convolving in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpcnet/functional.h"
#include "src/ops/conv2d/functional.h"
#include "src/ops/ops.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

double max_abs_of(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector_f64()) m = std::max(m, std::fabs(v));
  return m;
}

// conv2d_into with the given params into a fresh float32 output of x's layout choice. (p by
// reference: GCC 12.2 at -O2 -march=native miscompiles a Conv2dParams passed by value, storing 1
// for pad_h in the argument's copy: its SLP vectoriser copies the struct with the wrong vector.)
Tensor conv_with(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                 ops::Act act) {
  const int64_t oh = ops::conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h);
  const int64_t ow = ops::conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w);
  Tensor y = Tensor::empty_layout({x.size(0), w.size(0), oh, ow}, DType::kFloat32, x.device(),
                                  ops::conv2d_output_layout(x, w.shape(), p));
  ops::conv2d_into(x, w, b, p, act, y);
  return y.to_layout(Layout::kStrided);
}

}  // namespace

// int8 against float32: within the quantisation error (about 1% of the output's range for 32
// input channels of 3x3), for each activation, with and without bias, stride 1 and 2, and a
// blocked (nChw16c) input; the bias is large so that adding it at the wrong scale would show.
TEST(ConvInt8, MatchesFloat32WithinQuantisationError) {
  Tensor x = normal_tensor({2, 32, 11, 9}, 70);
  Tensor w = normal_tensor({48, 32, 3, 3}, 71, 0.1);
  Tensor b = normal_tensor({48}, 72, 3.0);
  const float scale = static_cast<float>(max_abs_of(x) / 127.0);
  for (const int64_t stride : {1, 2})
    for (const ops::Act act : {ops::Act::kNone, ops::Act::kRelu, ops::Act::kSilu})
      for (const bool bias : {true, false})
        for (const bool blocked : {false, true}) {
          ops::Conv2dParams p{stride, stride, 1, 1};
          const Tensor xin = blocked ? x.to_layout(Layout::kBlocked16) : x;
          const Tensor bb = bias ? b : Tensor();
          const Tensor ref = conv_with(xin, w, bb, p, act);
          p.int8_scale = scale;
          const Tensor q = conv_with(xin, w, bb, p, act);
          ASSERT_EQ(q.shape(), ref.shape());
          const auto a = q.to_vector_f64(), r = ref.to_vector_f64();
          double diff = 0, range = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            diff = std::max(diff, std::fabs(a[i] - r[i]));
            range = std::max(range, std::fabs(r[i]));
          }
          EXPECT_LT(diff, 0.02 * range) << "stride " << stride << " act "
                                        << static_cast<int>(act) << " bias " << bias
                                        << " blocked " << blocked << ": " << diff << " of "
                                        << range;
          EXPECT_GT(diff, 0.0) << "int8 gave float32's numbers exactly: not quantised?";
        }
}

// The arithmetic itself: x and w quantised by hand (round half to even, as the reorder's
// conversion; w per output channel to 127 / max |w[k]|), convolved in float64 and scaled back,
// equal the int8 convolution to float32 rounding.
// (CPUs with VNNI or AMX: without them oneDNN halves the weights to keep its 16-bit sums from
// saturating, which changes the rounding.)
TEST(ConvInt8, EqualsQuantisingByHand) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "this CPU has no AVX512-VNNI: oneDNN's int8 rounding differs";
  Tensor x = normal_tensor({1, 16, 6, 7}, 80);
  Tensor w = normal_tensor({8, 16, 1, 1}, 81, 0.2);
  Tensor b = normal_tensor({8}, 82, 0.5);
  const float sx = static_cast<float>(max_abs_of(x) / 127.0);
  ops::Conv2dParams p;
  p.int8_scale = sx;
  const auto got = conv_with(x, w, b, p, ops::Act::kNone).to_vector_f64();
  const auto vx = x.to_vector_f64(), vw = w.to_vector_f64(), vb = b.to_vector_f64();
  const int64_t C = 16, K = 8, HW = 6 * 7;
  for (int64_t k = 0; k < K; ++k) {
    double m = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, std::fabs(vw[static_cast<size_t>(k * C + c)]));
    const float wq = 127.f / static_cast<float>(m);
    for (int64_t i = 0; i < HW; ++i) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double xq = std::clamp(
            static_cast<double>(
                std::nearbyint(static_cast<float>(vx[static_cast<size_t>(c * HW + i)]) * (1.f / sx))),
            -128.0, 127.0);
        const double w8 = std::nearbyint(static_cast<float>(vw[static_cast<size_t>(k * C + c)]) * wq);
        acc += xq * w8;
      }
      const double want = acc * sx / wq + vb[static_cast<size_t>(k)];
      EXPECT_NEAR(got[static_cast<size_t>(k * HW + i)], want, 1e-4 * (1 + std::fabs(want)))
          << "k " << k << " i " << i;
    }
  }
}
