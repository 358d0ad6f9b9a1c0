// The staged assigner on a GPU (CUDA build only): runs tal_math.h's stages over v's buffers, all
// in device memory of `device`, on hpcnet's stream for it, then score_sum = the target-score sum
// (double) and inverse = 1 / max(score_sum, 1) (float), both device scalars. Nothing waits for
// the device.
#pragma once

#include "src/task/detect/tal_math.h"

namespace hpcnet::task::detect::tal {

void assign_cuda(const View& v, int device, double* score_sum, float* inverse);

}  // namespace hpcnet::task::detect::tal
