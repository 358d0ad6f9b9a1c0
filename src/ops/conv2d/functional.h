// The inference-only convolution of the ops layer (it looks at autograd's state, so it sits above
// the kernel API): YOLO's C2f at predict time writes each piece of its concatenation in place.
#pragma once

#include "src/ops/ops.h"

namespace hpcnet::ops {

// Inference only (nothing may require a gradient): conv2d(x, w, b) then `act`, written into
// `out`, a dense tensor of the output's shape in either layout, which may be a view of a larger
// buffer. A float32 x is read in bfloat16 where conv2d would (--precision bf16).
void conv2d_into(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p, Act act,
                 Tensor& out);

}  // namespace hpcnet::ops
