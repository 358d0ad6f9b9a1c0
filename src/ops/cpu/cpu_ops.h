// The CPU backend's kernels: the signatures of src/ops/kernels.inc in namespace hpcnet::cpu.
// float32 goes through oneDNN (convolution, pooling, inner product) or vectorised loops; float64
// through plain reference loops, used by the finite-difference gradient checks.
#pragma once

#include "src/ops/ops.h"

namespace hpcnet::cpu {
using ops::Conv2dParams;
using ops::Pool2dParams;
using ops::SgdParams;
using ops::BatchNormParams;
using ops::AdamWParams;
#include "src/ops/kernels.inc"
}  // namespace hpcnet::cpu
