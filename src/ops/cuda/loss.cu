// CUDA softmax-family ops over dim 1 of (N, C): log_softmax, nll_loss, fused cross_entropy (with
// label smoothing) and argmax. One thread per row runs the row arithmetic of
// src/ops/elementwise_math.h (the CPU's); the mean over rows runs in one block in a fixed order
// (deterministic), in double. An out-of-range label cannot throw from the device: its row's loss
// (and probabilities) become NaN and the label is recorded in the device's error slot, raised as
// an InputError at the next synchronisation (item(), a copy to the CPU, cuda_synchronize).
#include <cmath>

#include "src/ops/cuda/cuda_common.h"
#include "src/ops/elementwise_math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

__device__ void report_label(DeviceErrorSlot* slot, int64_t row, int64_t label, int64_t c) {
  if (atomicCAS(&slot->flag, 0, 1) == 0) {
    slot->row = row;
    slot->value = label;
    slot->limit = c;
  }
}

__device__ bool label_ok(int64_t t, int64_t c) { return t >= 0 && t < c; }

// Block-wide sum of one double per thread, in a fixed order; the result is valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  return part[0];
}

template <class T>
__global__ void log_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                                   int64_t c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    math::log_softmax_row(x + i * c, y + i * c, c);
}

template <class T>
__global__ void log_softmax_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                            T* __restrict__ dx, int64_t n, int64_t c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    math::log_softmax_backward_row(dy + i * c, y + i * c, dx + i * c, c);
}

// One block (kThreads threads).
template <class T>
__global__ void nll_loss_kernel(const T* __restrict__ logp, const int64_t* __restrict__ target,
                                T* __restrict__ loss, int64_t n, int64_t c, DeviceErrorSlot* slot) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t t = target[i];
    if (label_ok(t, c)) {
      acc -= static_cast<double>(logp[i * c + t]);
    } else {
      report_label(slot, i, t, c);
      acc = NAN;
    }
  }
  double total = block_sum(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(total / n);
}

template <class T>
__global__ void nll_loss_backward_kernel(const T* __restrict__ dloss,
                                         const int64_t* __restrict__ target, T* __restrict__ dlogp,
                                         int64_t n, int64_t c) {
  T g = math::nll_grad_scale(dloss[0], n);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n * c;
       k += int64_t{gridDim.x} * blockDim.x)
    dlogp[k] = (k % c == target[k / c]) ? g : T(0);
}

// One block (kThreads threads): probabilities per row, the mean loss in thread 0.
template <class T>
__global__ void cross_entropy_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                                     double eps, T* __restrict__ loss, T* __restrict__ prob,
                                     int64_t n, int64_t c, DeviceErrorSlot* slot) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t t = target[i];
    if (label_ok(t, c)) {
      acc += math::cross_entropy_row(x + i * c, prob + i * c, c, t, eps);
    } else {
      report_label(slot, i, t, c);
      for (int64_t j = 0; j < c; ++j) prob[i * c + j] = static_cast<T>(NAN);
      acc = NAN;
    }
  }
  double total = block_sum(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(total / n);
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ dloss,
                                              const T* __restrict__ prob,
                                              const int64_t* __restrict__ target, T on, T off,
                                              T* __restrict__ dlogits, int64_t n, int64_t c) {
  T g = math::cross_entropy_grad_scale(dloss[0], n);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n * c;
       k += int64_t{gridDim.x} * blockDim.x)
    dlogits[k] = math::cross_entropy_grad(g, prob[k], k % c == target[k / c], on, off);
}

template <class T>
__global__ void argmax_kernel(const T* __restrict__ x, int64_t* __restrict__ out, int64_t n,
                              int64_t c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = math::argmax_row(x + i * c, c);
}

}  // namespace

void log_softmax_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  dispatch_float(x.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    log_softmax_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), n, c);
    HPCNET_CUDA_LAUNCH(log_softmax_kernel);
  });
}

void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  cudaStream_t s = prepare(y);
  int64_t n = y.size(0), c = y.size(1);
  if (n == 0 || c == 0) return;
  dispatch_float(y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    log_softmax_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), y.data<T>(), dx.data<T>(), n, c);
    HPCNET_CUDA_LAUNCH(log_softmax_backward_kernel);
  });
}

void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss) {
  cudaStream_t s = prepare(logp);
  int64_t n = logp.size(0), c = logp.size(1);
  DeviceErrorSlot* slot = error_slot(logp.device().index);
  dispatch_float(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    nll_loss_kernel<T>
        <<<1, kThreads, 0, s>>>(logp.data<T>(), target.data<int64_t>(), loss.data<T>(), n, c, slot);
    HPCNET_CUDA_LAUNCH(nll_loss_kernel);
  });
}

void nll_loss_backward(const Tensor& dloss, const Tensor& target, Tensor& dlogp) {
  cudaStream_t s = prepare(dlogp);
  int64_t n = dlogp.size(0), c = dlogp.size(1);
  if (n * c == 0) return;
  dispatch_float(dlogp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    nll_loss_backward_kernel<T><<<grid_for(n * c), kThreads, 0, s>>>(
        dloss.data<T>(), target.data<int64_t>(), dlogp.data<T>(), n, c);
    HPCNET_CUDA_LAUNCH(nll_loss_backward_kernel);
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, Tensor& loss,
                           Tensor& prob) {
  cudaStream_t s = prepare(logits);
  int64_t n = logits.size(0), c = logits.size(1);
  DeviceErrorSlot* slot = error_slot(logits.device().index);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_kernel<T><<<1, kThreads, 0, s>>>(logits.data<T>(), target.data<int64_t>(), eps,
                                                   loss.data<T>(), prob.data<T>(), n, c, slot);
    HPCNET_CUDA_LAUNCH(cross_entropy_kernel);
  });
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                            double eps, Tensor& dlogits) {
  cudaStream_t s = prepare(prob);
  int64_t n = prob.size(0), c = prob.size(1);
  if (n * c == 0) return;
  math::SmoothedTarget w = math::smoothed_target(eps, c);
  dispatch_float(prob.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<grid_for(n * c), kThreads, 0, s>>>(
        dloss.data<T>(), prob.data<T>(), target.data<int64_t>(), static_cast<T>(w.on),
        static_cast<T>(w.off), dlogits.data<T>(), n, c);
    HPCNET_CUDA_LAUNCH(cross_entropy_backward_kernel);
  });
}

void argmax(const Tensor& x, Tensor& out) {
  cudaStream_t s = prepare(x);
  int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return;
  dispatch_float(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), out.data<int64_t>(), n, c);
    HPCNET_CUDA_LAUNCH(argmax_kernel);
  });
}

}  // namespace hpcnet::cuda
