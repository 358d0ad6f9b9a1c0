// bfloat16 <-> float32, written once for the CPU and the GPU (HPCNET_HD: __host__ __device__
// under nvcc, inline elsewhere): the tensor conversions (src/core/tensor.cpp), the CUDA
// conversion and epilogue kernels (src/ops/conv2d/cuda.cu) and the tests all call these, so the
// GPU rounds exactly as the CPU does. float32 -> bfloat16 rounds to nearest, ties to even (as
// oneDNN's reorder and torch's .to(torch.bfloat16)); a NaN stays a NaN with its sign and the top
// of its payload, made quiet; infinities and zeros keep their sign; a float32 subnormal becomes a
// zero of its sign, as the AVX512-BF16 instruction behind oneDNN's conversion (VCVTNEPS2BF16)
// treats it (torch's CPU and CUDA conversions would round it instead; below 1.2e-38 either way).
// bfloat16 -> float32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

#if !defined(HPCNET_HD)
#if defined(__CUDACC__)
#define HPCNET_HD __host__ __device__ __forceinline__
#else
#define HPCNET_HD inline
#endif
#endif

namespace hpcnet::math {

HPCNET_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

HPCNET_HD float bf16_to_float(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

HPCNET_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // subnormal, 0
  u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even (carries into the exponent)
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace hpcnet::math
