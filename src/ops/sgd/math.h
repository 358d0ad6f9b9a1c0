// The per-element arithmetic of the fused SGD update, shared by the CPU loop and the CUDA kernel
// (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include <cstdint>

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

// ---- SGD ----

// torch.optim.SGD's coefficients for one call, in the parameters' type.
template <class T>
struct SgdCoeffs {
  T lr, wd, mom, damp;  // damp = 1 - dampening
  bool momentum;        // momentum != 0: buffers are used
  bool first;           // buffers start as the (decayed) gradient
  bool nesterov;
};

// One element of the update, exactly in torch's order:
//   d = g + wd * p;  m = first ? d : mom * b + damp * d;  b = m;
//   p -= lr * (nesterov ? d + mom * m : m)      (without momentum: p -= lr * d)
template <class T>
HPCNET_HD void sgd_element(T& p, T g, T* b, const SgdCoeffs<T>& c) {
  if (!c.momentum) {
    p -= c.lr * (g + c.wd * p);
    return;
  }
  T d = g + c.wd * p;
  T m = c.first ? d : c.mom * *b + c.damp * d;
  *b = m;
  p -= c.lr * (c.nesterov ? d + c.mom * m : m);
}

}  // namespace hpcnet::math
