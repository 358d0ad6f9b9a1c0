// The per-element arithmetic of relu, add, scale, the bias epilogue, silu, sigmoid and mul,
// shared by the CPU loops and the CUDA kernels (src/ops/backend/device_math.h).
// Invariants: no allocation, no exceptions, no I/O; T is float or double.
#pragma once

#include "src/ops/backend/device_math.h"

namespace hpcnet::math {

// ---- relu, add, scale ----

// y = max(x, 0); NaN gives 0 (`x > 0` is false for NaN), as the CPU kernels always did.
template <class T>
HPCNET_HD T relu(T x) {
  return x > T(0) ? x : T(0);
}
// dx = dy where the forward output y > 0, else 0.
template <class T>
HPCNET_HD T relu_grad(T dy, T y) {
  return y > T(0) ? dy : T(0);
}
template <class T>
HPCNET_HD T add(T a, T b) {
  return a + b;
}
template <class T>
HPCNET_HD T scale(T x, T s) {
  return x * s;
}
// y = x + b, then relu when asked (the unfused bias epilogue of conv2d / linear).
template <class T>
HPCNET_HD T bias_act(T x, T b, bool relu_on) {
  T v = x + b;
  return relu_on ? relu(v) : v;
}

// ---- silu, sigmoid, mul ----

// 1 / (1 + e^-x), in the argument's precision (exp of a large -x gives inf and the result 0).
template <class T>
HPCNET_HD T sigmoid(T x) {
  return T(1) / (T(1) + exp_t(-x));
}
// dx = dy y (1 - y), y the forward output.
template <class T>
HPCNET_HD T sigmoid_grad(T dy, T y) {
  return dy * y * (T(1) - y);
}
// x sigmoid(x) (torch.nn.SiLU).
template <class T>
HPCNET_HD T silu(T x) {
  return x * sigmoid(x);
}
// dx = dy s (1 + x (1 - s)), s = sigmoid(x) of the forward input x.
template <class T>
HPCNET_HD T silu_grad(T dy, T x) {
  T s = sigmoid(x);
  return dy * s * (T(1) + x * (T(1) - s));
}
template <class T>
HPCNET_HD T mul(T a, T b) {
  return a * b;
}

}  // namespace hpcnet::math
