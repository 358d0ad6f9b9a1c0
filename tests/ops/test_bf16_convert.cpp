// The bfloat16 conversions every device shares (src/core/bf16.h): bit-exact with the CPU
// convolutions' own conversion (oneDNN's reorder, ops::to_bf16 on a CPU tensor) over millions of
// float32 patterns spread over all 2^32 and over the awkward ones (ties, NaN, infinities,
// subnormals, overflow), and exact on the way back (bfloat16 subnormals aside: they flush). The CUDA kernels call the same functions, so
// what is proven here is the GPU's rounding too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hpcnet/tensor.h"
#include "src/core/bf16.h"
#include "src/ops/ops.h"

using namespace hpcnet;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// oneDNN's conversion of these float32 patterns (the CPU's bf16 convolutions read x through it).
std::vector<uint16_t> onednn_bf16(const std::vector<uint32_t>& bits) {
  const int64_t n = static_cast<int64_t>(bits.size());
  Tensor x = Tensor::empty({1, 1, 1, n});
  std::memcpy(x.raw_data(), bits.data(), bits.size() * 4);
  Tensor y = ops::to_bf16(x);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  std::vector<uint16_t> out(bits.size());
  std::memcpy(out.data(), y.raw_data(), out.size() * 2);
  return out;
}

uint16_t bf(uint32_t bits) { return math::float_to_bf16(from_bits(bits)); }

}  // namespace

TEST(Bf16Convert, RoundsToNearestEvenOnHandWorkedCases) {
  EXPECT_EQ(bf(0x3f800000u), 0x3f80);  // 1
  EXPECT_EQ(bf(0x3f808000u), 0x3f80);  // 1 + half an ulp: tie, to even (down)
  EXPECT_EQ(bf(0x3f818000u), 0x3f82);  // tie, to even (up)
  EXPECT_EQ(bf(0x3f808001u), 0x3f81);  // just above the tie
  EXPECT_EQ(bf(0x3f807fffu), 0x3f80);  // just below
  EXPECT_EQ(bf(0xbf818000u), 0xbf82);  // negative ties the same way
  EXPECT_EQ(bf(0x3f7fffffu), 0x3f80);  // carry into the exponent
  EXPECT_EQ(bf(0x7f7fffffu), 0x7f80);  // the largest float rounds to infinity
  EXPECT_EQ(bf(0x7f7f7fffu), 0x7f7f);  // the largest bfloat16 stays finite
  EXPECT_EQ(bf(0x7f800000u), 0x7f80);  // +inf
  EXPECT_EQ(bf(0xff800000u), 0xff80);  // -inf
  EXPECT_EQ(bf(0x00000000u), 0x0000);  // +0
  EXPECT_EQ(bf(0x80000000u), 0x8000);  // -0
  // Subnormals become zeros of their sign (as VCVTNEPS2BF16, oneDNN's conversion, does).
  EXPECT_EQ(bf(0x00000001u), 0x0000);
  EXPECT_EQ(bf(0x00018000u), 0x0000);
  EXPECT_EQ(bf(0x00010000u), 0x0000);
  EXPECT_EQ(bf(0x007fffffu), 0x0000);
  EXPECT_EQ(bf(0x807fffffu), 0x8000);
  EXPECT_EQ(bf(0x00800000u), 0x0080);  // the smallest normal stays
  EXPECT_EQ(bf(0x00ffffffu), 0x0100);  // and rounds as any normal (up, into the next exponent)
  // NaN stays NaN, quiet, with its sign and the top of its payload; never an infinity.
  EXPECT_EQ(bf(0x7fc00000u), 0x7fc0);
  EXPECT_EQ(bf(0x7f800001u), 0x7fc0);  // signalling, low payload: quiet NaN, not +inf
  EXPECT_EQ(bf(0xff800001u), 0xffc0);
  EXPECT_EQ(bf(0x7fa50000u), 0x7fe5);
  EXPECT_EQ(bf(0x7fffffffu), 0x7fff);  // all-ones payload: no carry into the sign
}

TEST(Bf16Convert, WideningIsExactAndRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = math::bf16_to_float(static_cast<uint16_t>(h));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    ASSERT_EQ(u, h << 16);
    const bool nan = (h & 0x7fffu) > 0x7f80u, subnormal = (h & 0x7f80u) == 0;
    ASSERT_EQ(math::float_to_bf16(f), nan ? (h | 0x40u) : subnormal ? (h & 0x8000u) : h)
        << std::hex << h;
  }
}

TEST(Bf16Convert, BitExactWithTheCpuConvolutionsConversion) {
  if (!ops::cpu_supports_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 (oneDNN's bf16 conversion is not used here)";
  // Every 251st pattern of all 2^32 (17.1 million, every exponent and sign, both signs of NaN),
  // then every pattern whose low 16 bits sit at or next to a tie (0x7fff, 0x8000, 0x8001) or are
  // the extremes (0x0000, 0xffff), under each of the 65,536 high halves: 327,680 more.
  std::vector<uint32_t> bits;
  bits.reserve((uint64_t{1} << 32) / 251 + 5 * 65536 + 1);
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) bits.push_back(static_cast<uint32_t>(u));
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) bits.push_back(hi << 16 | lo);
  ASSERT_GT(bits.size(), 17'000'000u);
  size_t mismatches = 0, nans = 0;
  constexpr size_t kChunk = size_t{1} << 22;
  for (size_t at = 0; at < bits.size(); at += kChunk) {
    std::vector<uint32_t> part(bits.begin() + static_cast<std::ptrdiff_t>(at),
                               bits.begin() + static_cast<std::ptrdiff_t>(std::min(bits.size(), at + kChunk)));
    const std::vector<uint16_t> want = onednn_bf16(part);
    for (size_t i = 0; i < part.size(); ++i) {
      const uint16_t got = math::float_to_bf16(from_bits(part[i]));
      const bool nan = std::isnan(from_bits(part[i]));
      nans += nan;
      if (got != want[i] && ++mismatches <= 5)
        ADD_FAILURE() << std::hex << "float32 0x" << part[i] << ": hpcnet 0x" << got
                      << ", oneDNN 0x" << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << bits.size() << " patterns";
  EXPECT_GT(nans, 10'000u);  // NaN patterns were among them
}
