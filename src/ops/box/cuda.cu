// CUDA kernels of the detection losses (the CPU's src/ops/box/cpu.cpp, same arithmetic from
// src/ops/box/math.h): summed BCE with logits, the anchor gather, the DFL expectation and loss,
// the weighted CIoU loss. Sums run in two passes, in double and in a fixed order (deterministic):
// each of up to 256 blocks sums its grid-strided share, then one block sums the blocks' parts
// (the dense detect loss sums every anchor: one block alone took milliseconds). The gradient
// factor dloss is read on the device (no host synchronisation).
#include <algorithm>

#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/box/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

#define HPCNET_BOX_GRID_STRIDE(i, n)                                        \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// The sum of every thread's acc over the block, tree-reduced in a fixed order (every thread gets
// it).
__device__ double block_total(double acc) {
  __shared__ double part[kReduceThreads];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  return part[0];
}

// Block b of the grid: partial[b] = the sum of term(i) over its grid-strided share of i < n.
template <class Term>
__device__ void grid_partial(int64_t n, Term term, double* partial) {
  double acc = 0;
  HPCNET_BOX_GRID_STRIDE(i, n) acc += term(i);
  const double total = block_total(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block: out[0] = the sum of the blocks' parts.
template <class T>
__global__ void finish_sum_kernel(const double* __restrict__ partial, int64_t blocks, T* out) {
  double acc = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) acc += partial[b];
  const double total = block_total(acc);
  if (threadIdx.x == 0) out[0] = static_cast<T>(total);
}

// The two passes: launch(grid, partial) runs a kernel calling grid_partial; out[0] gets the sum.
template <class T, class Launch>
void two_pass_sum(const Tensor& like, int64_t n, cudaStream_t s, T* out, Launch launch) {
  const int64_t blocks = std::clamp<int64_t>((n + 8 * kReduceThreads - 1) / (8 * kReduceThreads),
                                             1, 256);
  Tensor partial = Tensor::empty({blocks}, DType::kFloat64, like.device());
  launch(static_cast<int>(blocks), partial.data<double>());
  finish_sum_kernel<T><<<1, kReduceThreads, 0, s>>>(partial.data<double>(), blocks, out);
  HPCNET_CUDA_LAUNCH(finish_sum_kernel);
}

template <class T>
__global__ void bce_sum_kernel(const T* __restrict__ x, const T* __restrict__ t, double* partial,
                               int64_t n) {
  grid_partial(n, [&](int64_t i) { return static_cast<double>(math::bce_logits(x[i], t[i])); },
               partial);
}

template <class T>
__global__ void bce_grad_kernel(const T* __restrict__ dloss, const T* __restrict__ x,
                                const T* __restrict__ t, T* __restrict__ dx, int64_t n) {
  const T g = dloss[0];
  HPCNET_BOX_GRID_STRIDE(i, n) dx[i] = g * math::bce_logits_grad(x[i], t[i]);
}

template <class T>
__global__ void gather_anchors_kernel(const T* __restrict__ x, const int64_t* __restrict__ idx,
                                      T* __restrict__ y, int64_t M, int64_t C, int64_t A) {
  HPCNET_BOX_GRID_STRIDE(k, M * C) {
    const int64_t m = k / C, c = k % C, b = idx[m] / A, a = idx[m] % A;
    y[k] = x[(b * C + c) * A + a];
  }
}

template <class T>
__global__ void zero_kernel(T* p, int64_t n) {
  HPCNET_BOX_GRID_STRIDE(i, n) p[i] = T(0);
}

template <class T>
__global__ void scatter_anchors_kernel(const T* __restrict__ dy, const int64_t* __restrict__ idx,
                                       T* dx, int64_t M, int64_t C, int64_t A) {
  HPCNET_BOX_GRID_STRIDE(k, M * C) {
    const int64_t m = k / C, c = k % C, b = idx[m] / A, a = idx[m] % A;
    atomicAdd(dx + (b * C + c) * A + a, dy[k]);  // repeated indices add up
  }
}

template <class T>
__global__ void dfl_expect_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t N,
                                  int64_t R) {
  HPCNET_BOX_GRID_STRIDE(i, N) y[i] = math::dfl_expect_row(x + i * R, R);
}

template <class T>
__global__ void dfl_expect_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                       T* __restrict__ dx, int64_t N, int64_t R) {
  HPCNET_BOX_GRID_STRIDE(i, N) math::dfl_expect_row_grad(x + i * R, R, dy[i], dx + i * R);
}

template <class T>
__global__ void ciou_sum_kernel(const T* __restrict__ p, const T* __restrict__ q,
                                const T* __restrict__ w, double* partial, int64_t M) {
  grid_partial(
      M,
      [&](int64_t m) {
        return static_cast<double>((T(1) - math::ciou(p + 4 * m, q + 4 * m)) * w[m]);
      },
      partial);
}

template <class T>
__global__ void ciou_grad_kernel(const T* __restrict__ dloss, const T* __restrict__ p,
                                 const T* __restrict__ q, const T* __restrict__ w,
                                 bool alpha_grad, T* __restrict__ dp, int64_t M) {
  const T g = dloss[0];
  HPCNET_BOX_GRID_STRIDE(m, M)
  math::ciou(p + 4 * m, q + 4 * m, -w[m] * g, dp + 4 * m, alpha_grad);
}

template <class T>
__global__ void dfl_sum_kernel(const T* __restrict__ x, const T* __restrict__ t,
                               const T* __restrict__ w, double* partial, int64_t N, int64_t R) {
  grid_partial(
      N,
      [&](int64_t i) { return static_cast<double>(math::dfl_loss_row(x + i * R, R, t[i]) * w[i]); },
      partial);
}

template <class T>
__global__ void dfl_grad_kernel(const T* __restrict__ dloss, const T* __restrict__ x,
                                const T* __restrict__ t, const T* __restrict__ w,
                                T* __restrict__ dx, int64_t N, int64_t R) {
  const T g = dloss[0];
  HPCNET_BOX_GRID_STRIDE(i, N) math::dfl_loss_row_grad(x + i * R, R, t[i], g * w[i], dx + i * R);
}

}  // namespace

void bce_with_logits_forward(const Tensor& x, const Tensor& t, Tensor& loss) {
  cudaStream_t s = prepare(x);
  dispatch_float(x.dtype(), op_name::bce_with_logits, [&](auto tag) {
    using T = decltype(tag);
    two_pass_sum(x, x.numel(), s, loss.data<T>(), [&](int blocks, double* partial) {
      bce_sum_kernel<T><<<blocks, kReduceThreads, 0, s>>>(x.data<T>(), t.data<T>(), partial,
                                                          x.numel());
      HPCNET_CUDA_LAUNCH(bce_sum_kernel);
    });
  });
}

void bce_with_logits_backward(const Tensor& dloss, const Tensor& x, const Tensor& t, Tensor& dx) {
  cudaStream_t s = prepare(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "bce_with_logits_backward", [&](auto tag) {
    using T = decltype(tag);
    bce_grad_kernel<T><<<grid_for(n), kThreads, 0, s>>>(dloss.data<T>(), x.data<T>(),
                                                        t.data<T>(), dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(bce_grad_kernel);
  });
}

void gather_anchors_forward(const Tensor& x, const Tensor& idx, Tensor& y) {
  cudaStream_t s = prepare(x);
  const int64_t M = idx.numel(), C = x.size(1), A = x.size(2);
  if (M * C == 0) return;
  dispatch_float(x.dtype(), op_name::gather_anchors, [&](auto tag) {
    using T = decltype(tag);
    gather_anchors_kernel<T><<<grid_for(M * C), kThreads, 0, s>>>(
        x.data<T>(), idx.data<int64_t>(), y.data<T>(), M, C, A);
    HPCNET_CUDA_LAUNCH(gather_anchors_kernel);
  });
}

void gather_anchors_backward(const Tensor& dy, const Tensor& idx, Tensor& dx) {
  cudaStream_t s = prepare(dx);
  const int64_t M = idx.numel(), C = dx.size(1), A = dx.size(2), n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype(), "gather_anchors_backward", [&](auto tag) {
    using T = decltype(tag);
    zero_kernel<T><<<grid_for(n), kThreads, 0, s>>>(dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(zero_kernel);
    if (M * C == 0) return;
    scatter_anchors_kernel<T><<<grid_for(M * C), kThreads, 0, s>>>(
        dy.data<T>(), idx.data<int64_t>(), dx.data<T>(), M, C, A);
    HPCNET_CUDA_LAUNCH(scatter_anchors_kernel);
  });
}

void dfl_expect_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  const int64_t N = x.size(0), R = x.size(1);
  if (N == 0) return;
  dispatch_float(x.dtype(), op_name::dfl_expect, [&](auto tag) {
    using T = decltype(tag);
    dfl_expect_kernel<T><<<grid_for(N), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), N, R);
    HPCNET_CUDA_LAUNCH(dfl_expect_kernel);
  });
}

void dfl_expect_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  cudaStream_t s = prepare(x);
  const int64_t N = x.size(0), R = x.size(1);
  if (N == 0) return;
  dispatch_float(x.dtype(), "dfl_expect_backward", [&](auto tag) {
    using T = decltype(tag);
    dfl_expect_grad_kernel<T>
        <<<grid_for(N), kThreads, 0, s>>>(dy.data<T>(), x.data<T>(), dx.data<T>(), N, R);
    HPCNET_CUDA_LAUNCH(dfl_expect_grad_kernel);
  });
}

void ciou_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                       Tensor& loss) {
  cudaStream_t s = prepare(pred);
  dispatch_float(pred.dtype(), op_name::ciou_loss, [&](auto tag) {
    using T = decltype(tag);
    two_pass_sum(pred, pred.size(0), s, loss.data<T>(), [&](int blocks, double* partial) {
      ciou_sum_kernel<T><<<blocks, kReduceThreads, 0, s>>>(pred.data<T>(), target.data<T>(),
                                                           weight.data<T>(), partial,
                                                           pred.size(0));
      HPCNET_CUDA_LAUNCH(ciou_sum_kernel);
    });
  });
}

void ciou_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                        const Tensor& weight, bool alpha_grad, Tensor& dpred) {
  cudaStream_t s = prepare(pred);
  const int64_t M = pred.size(0);
  if (M == 0) return;
  dispatch_float(pred.dtype(), "ciou_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    ciou_grad_kernel<T><<<grid_for(M), kThreads, 0, s>>>(dloss.data<T>(), pred.data<T>(),
                                                         target.data<T>(), weight.data<T>(),
                                                         alpha_grad, dpred.data<T>(), M);
    HPCNET_CUDA_LAUNCH(ciou_grad_kernel);
  });
}

void dfl_loss_forward(const Tensor& pred, const Tensor& target, const Tensor& weight,
                      Tensor& loss) {
  cudaStream_t s = prepare(pred);
  dispatch_float(pred.dtype(), op_name::dfl_loss, [&](auto tag) {
    using T = decltype(tag);
    two_pass_sum(pred, pred.size(0), s, loss.data<T>(), [&](int blocks, double* partial) {
      dfl_sum_kernel<T><<<blocks, kReduceThreads, 0, s>>>(pred.data<T>(), target.data<T>(),
                                                          weight.data<T>(), partial,
                                                          pred.size(0), pred.size(1));
      HPCNET_CUDA_LAUNCH(dfl_sum_kernel);
    });
  });
}

void dfl_loss_backward(const Tensor& dloss, const Tensor& pred, const Tensor& target,
                       const Tensor& weight, Tensor& dpred) {
  cudaStream_t s = prepare(pred);
  const int64_t N = pred.size(0), R = pred.size(1);
  if (N == 0) return;
  dispatch_float(pred.dtype(), "dfl_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    dfl_grad_kernel<T><<<grid_for(N), kThreads, 0, s>>>(dloss.data<T>(), pred.data<T>(),
                                                        target.data<T>(), weight.data<T>(),
                                                        dpred.data<T>(), N, R);
    HPCNET_CUDA_LAUNCH(dfl_grad_kernel);
  });
}

}  // namespace hpcnet::cuda
