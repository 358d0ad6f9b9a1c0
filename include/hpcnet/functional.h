// Differentiable ops (hpcnet::F), as torch.nn.functional: each computes its output with the
// backend kernels in src/ops/ops.h and, when an input requires grad and grad mode is on, records a
// Node whose backward sits beside the forward in src/ops/NAME.cpp. Outputs are new tensors; no op
// here modifies its inputs.
#pragma once

#include "hpcnet/autograd.h"
#include "hpcnet/tensor.h"

namespace hpcnet::F {

// x (N, C, H, W), weight (K, C, R, S), bias (K,) or undefined -> (N, K, P, Q).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
              int64_t padding = 0);
// conv2d followed by relu in one kernel (oneDNN post-op); same result as relu(conv2d(...)).
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
                   int64_t padding = 0);
// x (N, C, H, W) -> (N, C, P, Q); stride defaults to kernel_size as in PyTorch.
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
// x (N, IN), weight (OUT, IN), bias (OUT,) or undefined -> (N, OUT).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor relu(const Tensor& x);
Tensor add(const Tensor& a, const Tensor& b);
// A view with a new shape (one dim may be -1); the input must be contiguous.
Tensor reshape(const Tensor& x, const Shape& shape);
// torch.flatten(x, start_dim): dims from start_dim on are merged.
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
// Over dim 1 of (N, C).
Tensor log_softmax(const Tensor& x);
// Mean NLL of log-probabilities (N, C) at int64 targets (N,) -> 0-d.
Tensor nll_loss(const Tensor& logp, const Tensor& target);
// Mean cross-entropy of logits (N, C) at int64 targets (N,) -> 0-d (fused log_softmax + nll).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);
Tensor sum(const Tensor& x);   // -> 0-d
Tensor mean(const Tensor& x);  // -> 0-d
// Not differentiable: (N, C) -> (N,) int64.
Tensor argmax(const Tensor& x);

}  // namespace hpcnet::F
