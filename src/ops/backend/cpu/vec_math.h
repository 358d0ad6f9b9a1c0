// Float32 math for CPU loops that must vectorise: no library calls inside, so GCC turns the loops
// around these into AVX2/AVX-512 code (libm's expf and logf are calls it cannot vectorise). The
// float64 paths of the ops keep libm's (the finite-difference checks run in float64).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hpcnet::cpu {

// e^x in float32 without a library call, so the loops around it vectorise (libm's expf does not):
// x = n ln2 + r (n = round(x log2 e), r in [-ln2/2, ln2/2], ln2 split in two for exactness), e^r by
// its degree-6 minimax polynomial (Cephes' expf coefficients), 2^n through the exponent bits.
// Relative error below 2e-7 on [-87, 88]; x is clamped there (e^-87 ~ 1.6e-38, e^88 ~ 1.7e38).
// A NaN stays NaN (as expf), so a NaN logit gives a NaN loss rather than a finite one.
inline float exp_vec(float in) {
  // maxss/minss (fmin/fmax are library calls). x: NaN becomes -87, so the integer conversion
  // below never sees one; kept: NaN stays NaN (the first operand of maxss/minss is returned
  // when either is NaN). kept - kept is 0, or NaN for a NaN, and is added at the end: no
  // branch, so the loops around this still vectorise (a select on in != in did not).
  const float x = std::max(-87.0f, std::min(in, 88.0f));
  const float kept = std::min(std::max(in, -87.0f), 88.0f);
  // floor(x log2 e + 0.5) by truncation of a positive number (no branch: the loop vectorises).
  const float n =
      static_cast<float>(static_cast<int32_t>(x * 1.44269504088896341f + 128.5f)) - 128.0f;

  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale + (kept - kept);
}

}  // namespace hpcnet::cpu
