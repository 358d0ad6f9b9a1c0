// Direct float32 convolution for small stride-1 layers (the LeNet/CIFAR shapes), where oneDNN 2.6
// with plain NCHW falls back to im2col + GEMM. Vectorised over output columns with GCC vector
// extensions (16 floats; AVX-512 registers on this machine), register-blocked over output
// channels, on zero-padded scratch copies so no load needs a bounds check. NCHW in and out.
#pragma once

#include "src/ops/backend/cpu/cpu_ops.h"

namespace hpcnet::cpu {

// Whether the direct kernels handle this convolution: stride 1, square kernel of 1..7, padding
// < kernel, and small enough channel counts that they beat oneDNN's plain-layout path.
bool conv2d_direct_applies(const Shape& x, const Shape& w, const Conv2dParams& p);

// Same contracts as conv2d_forward / conv2d_backward_data / conv2d_backward_weights (overwrite).
void conv2d_direct_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                           const Conv2dParams& p, bool relu);
void conv2d_direct_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx,
                                 const Conv2dParams& p);
void conv2d_direct_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                                    const Conv2dParams& p);

// Which float32 path conv2d takes: kAuto picks the direct kernels where they apply.
enum class ConvAlgo { kAuto, kOneDnn, kDirect };
void set_conv_algo(ConvAlgo a);
ConvAlgo conv_algo();

}  // namespace hpcnet::cpu
