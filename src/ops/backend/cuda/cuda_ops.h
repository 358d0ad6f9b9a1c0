// The CUDA backend's kernels: the signatures of src/ops/kernels.inc in namespace hpcnet::cuda
// (declarations only, no CUDA header: src/ops/dispatch.h includes this in the CUDA build).
// float32 and float64; cuDNN for convolution, cuBLASLt for linear, own kernels (with the
// arithmetic of src/ops/<family>/math.h) for everything else. All work is queued on the tensor's
// device stream; nothing here waits for the device.
#pragma once

#include "src/ops/ops.h"

namespace hpcnet::cuda {
using ops::Act;
using ops::Conv2dParams;
using ops::Pool2dParams;
using ops::SgdParams;
using ops::BatchNormParams;
using ops::AdamWParams;
#include "src/ops/kernels.inc"

// Lets cuDNN and cuBLASLt use TF32 tensor cores for float32 (off by default, for parity with the
// CPU; on, float32 convolutions and matrix products round their inputs to 10-bit mantissas).
void set_allow_tf32(bool on);
bool allow_tf32();
// Restricts cuDNN's backward convolutions to deterministic algorithms (on by default, for
// reproducible runs and the parity tests; off, cuDNN's heuristics may pick faster ones that sum
// with atomics).
void set_deterministic(bool on);
bool deterministic();
}  // namespace hpcnet::cuda
