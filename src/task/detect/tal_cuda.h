// The staged assigner on a GPU (CUDA build only): runs tal_math.h's stages over v's buffers, all
// in device memory of `device`, on hpcnet's stream for it; score_sum = the target-score sum
// (double), a device scalar. inverse_cuda: inverse = 1 / max(score_sum, 1) (float), after the
// ranks' sum where there are several. Nothing waits for the device.
#pragma once

#include "src/task/detect/tal_math.h"

namespace hpcnet::task::detect::tal {

void assign_cuda(const View& v, int device, double* score_sum);
void inverse_cuda(const double* score_sum, float* inverse, int device);

}  // namespace hpcnet::task::detect::tal
