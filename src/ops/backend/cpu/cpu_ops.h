// The CPU backend's kernels: the signatures of src/ops/kernels.inc in namespace hpcnet::cpu.
// float32 goes through oneDNN (convolution, pooling, inner product) or vectorised loops; float64
// through plain reference loops, used by the finite-difference gradient checks.
#pragma once

#include "src/ops/ops.h"

namespace hpcnet::cpu {
using ops::Act;
using ops::Conv2dParams;
using ops::Pool2dParams;
using ops::SgdParams;
using ops::BatchNormParams;
using ops::AdamWParams;
#include "src/ops/kernels.inc"

// Whether a float32 convolution of x by weights w would run on oneDNN's blocked kernels and
// should write its output in Layout::kBlocked16 (off when HPCNET_BLOCKED=0 in the environment).
bool conv2d_wants_blocked(const Tensor& x, const Shape& w, const Conv2dParams& p);
// Whether this convolution computes in bfloat16 (--precision bf16 and a shape it applies to; the
// conv node then converts its input once for the forward and the weight gradient, and the output
// gradient once for both backwards, through ops::to_bf16, a oneDNN reorder here).
bool conv2d_uses_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p);
// Whether a convolution that records no gradient (inference) computes in bfloat16: wider than
// conv2d_uses_bf16 (strided ones with 32+ input channels too), through Conv2dParams::bf16.
bool conv2d_inference_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p);
// Turns blocked activations on or off for convolutions started afterwards (tests, A/B timing).
void set_blocked_layouts(bool on);
}  // namespace hpcnet::cpu
