// The base of every op family's math.h (src/ops/<family>/math.h): the per-element (and per-row)
// arithmetic of hpcnet's own kernels is written once as __host__ __device__ inline functions
// (HPCNET_HD) that the CPU loops (<family>/cpu.cpp) and the CUDA kernels (<family>/cuda.cu) both
// call, so the CPU tests exercise the arithmetic the GPU runs. Plain C++ when compiled by a host
// compiler; no CUDA headers needed.
// Invariants: no allocation, no exceptions, no I/O; T is float or double; sums over a row
// accumulate in double, as the CPU kernels always have.
#pragma once

#include <math.h>

#include <cstdint>

#include "src/core/bf16.h"  // HPCNET_HD, and the bfloat16 conversions

namespace hpcnet::math {

// exp/sqrt/log with the precision of the argument (expf for float, exp for double), on both
// sides.
HPCNET_HD float exp_t(float x) { return ::expf(x); }
HPCNET_HD double exp_t(double x) { return ::exp(x); }
HPCNET_HD float sqrt_t(float x) { return ::sqrtf(x); }
HPCNET_HD double sqrt_t(double x) { return ::sqrt(x); }
HPCNET_HD double log_d(double x) { return ::log(x); }

}  // namespace hpcnet::math
