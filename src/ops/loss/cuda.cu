// CUDA softmax-family ops over dim 1 of (N, C): log_softmax, nll_loss, fused cross_entropy (with
// label smoothing) and argmax; and cross_entropy2d over dim 1 of (N, C, H, W). One thread per row
// (per pixel) runs the arithmetic of src/ops/loss/math.h (the CPU's); the mean over rows
// runs in one block in a fixed order (deterministic), in double; cross_entropy2d's sums go
// through per-block partials summed by one block, also in a fixed order. An out-of-range label
// cannot throw from the device: its row's (pixel's) loss and probabilities become NaN and the
// label is recorded in the device's error slot (cross_entropy2d records the image index as the
// sample), raised as an InputError at the next synchronisation (item(), a copy to the CPU,
// cuda_synchronize).
#include <cmath>

#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/loss/math.h"

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

// Block-wide sums of two doubles per thread, in a fixed order; valid in thread 0.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double pa[kThreads], pb[kThreads];
  pa[threadIdx.x] = a;
  pb[threadIdx.x] = b;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      pa[threadIdx.x] += pa[threadIdx.x + s];
      pb[threadIdx.x] += pb[threadIdx.x + s];
    }
    __syncthreads();
  }
  a = pa[0];
  b = pb[0];
}

// Blocks of cross_entropy2d's first pass: each block's partial (loss, weight) sums.
constexpr int64_t kCe2dMaxBlocks = 1024;

// One thread per pixel (grid-stride): probabilities at every pixel; each block writes its sums
// of w[t] * nll and w[t] over counted pixels to part[2 block], part[2 block + 1].
template <class T>
__global__ void cross_entropy2d_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                                       const T* __restrict__ weight, int64_t ignore_index,
                                       T* __restrict__ prob, double* __restrict__ part,
                                       int64_t pixels, int64_t c, int64_t hw,
                                       DeviceErrorSlot* slot) {
  double acc = 0, wsum = 0;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < pixels;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / hw, off = b * c * hw + k % hw, t = target[k];
    if (t == ignore_index) {
      math::softmax_nll_strided(x + off, prob + off, c, hw, int64_t{-1});
    } else if (label_ok(t, c)) {
      const double wt = weight ? static_cast<double>(weight[t]) : 1.0;
      acc += wt * math::softmax_nll_strided(x + off, prob + off, c, hw, t);
      wsum += wt;
    } else {
      report_label(slot, b, t, c);
      for (int64_t j = 0; j < c; ++j) prob[off + j * hw] = static_cast<T>(NAN);
      acc = NAN;
    }
  }
  block_sum2(acc, wsum);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = acc;
    part[2 * blockIdx.x + 1] = wsum;
  }
}

// One block: the sums of the first pass's `blocks` partials -> loss = sum / weight (NaN when no
// pixel counted) and total_weight.
template <class T>
__global__ void cross_entropy2d_reduce_kernel(const double* __restrict__ part, int64_t blocks,
                                              T* __restrict__ loss,
                                              double* __restrict__ total_weight) {
  double acc = 0, wsum = 0;
  for (int64_t i = threadIdx.x; i < blocks; i += blockDim.x) {
    acc += part[2 * i];
    wsum += part[2 * i + 1];
  }
  block_sum2(acc, wsum);
  if (threadIdx.x == 0) {
    loss[0] = static_cast<T>(acc / wsum);
    total_weight[0] = wsum;
  }
}

// One thread per element of dlogits (N, C, H, W).
template <class T>
__global__ void cross_entropy2d_backward_kernel(
    const T* __restrict__ dloss, const T* __restrict__ prob, const int64_t* __restrict__ target,
    const T* __restrict__ weight, const double* __restrict__ total_weight, int64_t ignore_index,
    T* __restrict__ dlogits, int64_t total, int64_t c, int64_t hw) {
  const T g = dloss[0];
  const double tw = total_weight[0];
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = k % hw, j = k / hw % c, b = k / (c * hw);
    const int64_t t = target[b * hw + p];
    if (t == ignore_index) {
      dlogits[k] = T(0);
    } else if (!label_ok(t, c)) {
      dlogits[k] = static_cast<T>(NAN);
    } else {
      const T scale =
          math::cross_entropy2d_grad_scale(g, weight ? static_cast<double>(weight[t]) : 1.0, tw);
      dlogits[k] = math::cross_entropy_grad(scale, prob[k], j == t, T(1), T(0));
    }
  }
}

// dice_loss, pass 1: one thread per pixel (grid-stride) writes the softmax; an out-of-range
// label poisons its probabilities (NaN) and is recorded.
template <class T>
__global__ void dice_softmax_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                                    int64_t ignore_index, T* __restrict__ prob, int64_t pixels,
                                    int64_t c, int64_t hw, DeviceErrorSlot* slot) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < pixels;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / hw, off = b * c * hw + k % hw, t = target[k];
    math::softmax_nll_strided(x + off, prob + off, c, hw, int64_t{-1});
    if (t != ignore_index && !label_ok(t, c)) {
      report_label(slot, b, t, c);
      for (int64_t j = 0; j < c; ++j) prob[off + j * hw] = static_cast<T>(NAN);
    }
  }
}

// Pass 2: block j sums class j's (I, P) and T over the counted pixels, in a fixed order.
template <class T>
__global__ void dice_stats_kernel(const T* __restrict__ prob, const int64_t* __restrict__ target,
                                  int64_t ignore_index, double* __restrict__ stats, int64_t pixels,
                                  int64_t c, int64_t hw) {
  const int64_t j = blockIdx.x;
  double inter = 0, psum = 0, tcount = 0;
  for (int64_t k = threadIdx.x; k < pixels; k += blockDim.x) {
    const int64_t t = target[k];
    if (t == ignore_index) continue;
    const double p = static_cast<double>(prob[(k / hw) * c * hw + j * hw + k % hw]);
    psum += p;
    if (t == j) inter += p, tcount += 1;
  }
  block_sum2(inter, psum);
  double unused = 0;
  block_sum2(tcount, unused);
  if (threadIdx.x == 0) {
    stats[j] = inter;
    stats[c + j] = psum;
    stats[2 * c + j] = tcount;
  }
}

// Pass 3 (one thread): the loss and the gradient's class terms, classes in order.
template <class T>
__global__ void dice_loss_kernel(const double* __restrict__ stats, const T* __restrict__ weight,
                                 int64_t c, double smooth, double eps, T* __restrict__ loss,
                                 double* __restrict__ coef) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double W = 0;
  for (int64_t j = 0; j < c; ++j) W += weight ? static_cast<double>(weight[j]) : 1.0;
  double total = 0;
  for (int64_t j = 0; j < c; ++j)
    total += math::dice_class_terms(stats[j], stats[c + j], stats[2 * c + j],
                                    weight ? static_cast<double>(weight[j]) : 1.0, W, smooth, eps,
                                    coef[j], coef[c + j]);
  loss[0] = static_cast<T>(total);
}

// One thread per pixel.
template <class T>
__global__ void dice_backward_kernel(const T* __restrict__ dloss, const T* __restrict__ prob,
                                     const int64_t* __restrict__ target,
                                     const double* __restrict__ coef, int64_t ignore_index,
                                     T* __restrict__ dlogits, int64_t pixels, int64_t c,
                                     int64_t hw) {
  const double g = static_cast<double>(dloss[0]);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < pixels;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t off = (k / hw) * c * hw + k % hw, t = target[k];
    if (t == ignore_index) {
      for (int64_t j = 0; j < c; ++j) dlogits[off + j * hw] = T(0);
    } else if (!label_ok(t, c)) {
      for (int64_t j = 0; j < c; ++j) dlogits[off + j * hw] = static_cast<T>(NAN);
    } else {
      math::dice_grad_pixel(prob + off, dlogits + off, c, hw, t, coef, g);
    }
  }
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
  dispatch_float(x.dtype(), op_name::log_softmax, [&](auto tag) {
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
  dispatch_float(logp.dtype(), op_name::nll_loss, [&](auto tag) {
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
  dispatch_float(logits.dtype(), op_name::cross_entropy, [&](auto tag) {
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

void cross_entropy2d_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, Tensor& loss, Tensor& prob,
                             Tensor& total_weight) {
  cudaStream_t s = prepare(logits);
  const int64_t n = logits.size(0), c = logits.size(1), hw = logits.size(2) * logits.size(3);
  const int64_t pixels = n * hw;
  const int64_t blocks = grid_for(pixels, kThreads, kCe2dMaxBlocks);
  DeviceErrorSlot* slot = error_slot(logits.device().index);
  Scratch part(sizeof(double) * 2 * blocks, logits.device().index);
  auto* pp = static_cast<double*>(part.get());
  dispatch_float(logits.dtype(), op_name::cross_entropy2d, [&](auto tag) {
    using T = decltype(tag);
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    cross_entropy2d_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        logits.data<T>(), target.data<int64_t>(), pw, ignore_index, prob.data<T>(), pp, pixels, c,
        hw, slot);
    HPCNET_CUDA_LAUNCH(cross_entropy2d_kernel);
    cross_entropy2d_reduce_kernel<T>
        <<<1, kThreads, 0, s>>>(pp, blocks, loss.data<T>(), total_weight.data<double>());
    HPCNET_CUDA_LAUNCH(cross_entropy2d_reduce_kernel);
  });
}

void cross_entropy2d_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                              const Tensor& weight, const Tensor& total_weight,
                              int64_t ignore_index, Tensor& dlogits) {
  cudaStream_t s = prepare(prob);
  const int64_t total = prob.numel(), c = prob.size(1), hw = prob.size(2) * prob.size(3);
  if (total == 0) return;
  dispatch_float(prob.dtype(), "cross_entropy2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    cross_entropy2d_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dloss.data<T>(), prob.data<T>(), target.data<int64_t>(), pw, total_weight.data<double>(),
        ignore_index, dlogits.data<T>(), total, c, hw);
    HPCNET_CUDA_LAUNCH(cross_entropy2d_backward_kernel);
  });
}

void argmax(const Tensor& x, Tensor& out) {
  cudaStream_t s = prepare(x);
  int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::argmax, [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), out.data<int64_t>(), n, c);
    HPCNET_CUDA_LAUNCH(argmax_kernel);
  });
}

void dice_loss_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, double smooth, double eps, Tensor& loss, Tensor& prob,
                       Tensor& coef) {
  cudaStream_t s = prepare(logits);
  const int64_t n = logits.size(0), c = logits.size(1), hw = logits.size(2) * logits.size(3);
  const int64_t pixels = n * hw;
  DeviceErrorSlot* slot = error_slot(logits.device().index);
  Scratch stats(sizeof(double) * 3 * c, logits.device().index);
  auto* ps = static_cast<double*>(stats.get());
  dispatch_float(logits.dtype(), op_name::dice_loss, [&](auto tag) {
    using T = decltype(tag);
    if (pixels > 0) {
      dice_softmax_kernel<T>
          <<<grid_for(pixels), kThreads, 0, s>>>(logits.data<T>(), target.data<int64_t>(),
                                                 ignore_index, prob.data<T>(), pixels, c, hw, slot);
      HPCNET_CUDA_LAUNCH(dice_softmax_kernel);
    }
    dice_stats_kernel<T><<<static_cast<unsigned>(c), kThreads, 0, s>>>(
        prob.data<T>(), target.data<int64_t>(), ignore_index, ps, pixels, c, hw);
    HPCNET_CUDA_LAUNCH(dice_stats_kernel);
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    dice_loss_kernel<T>
        <<<1, 1, 0, s>>>(ps, pw, c, smooth, eps, loss.data<T>(), coef.data<double>());
    HPCNET_CUDA_LAUNCH(dice_loss_kernel);
  });
}

void dice_loss_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                        const Tensor& coef, int64_t ignore_index, Tensor& dlogits) {
  cudaStream_t s = prepare(prob);
  const int64_t c = prob.size(1), hw = prob.size(2) * prob.size(3), pixels = prob.size(0) * hw;
  if (pixels == 0) return;
  dispatch_float(prob.dtype(), "dice_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    dice_backward_kernel<T><<<grid_for(pixels), kThreads, 0, s>>>(
        dloss.data<T>(), prob.data<T>(), target.data<int64_t>(), coef.data<double>(), ignore_index,
        dlogits.data<T>(), pixels, c, hw);
    HPCNET_CUDA_LAUNCH(dice_backward_kernel);
  });
}

}  // namespace hpcnet::cuda
