// CUDA max pooling on plain NCHW, float32 and float64, with the CPU backend's workspace
// semantics: the forward records, per output, the position (within its plane) of the window's
// maximum as int32 (-1 where a window saw only padding), found by math::pool_window_max (the
// CPU's own scan, ties to the first position). The backward gathers: each input position sums
// the output gradients whose recorded maximum it is, over the windows covering it in row-major
// order, so it overwrites dx, needs no atomics and is deterministic (the CPU's sums, in the
// CPU's order). Own kernels rather than cuDNN pooling: cuDNN's backward needs x and y instead of
// positions, and its tie and padding rules are not documented to match.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/max_pool2d/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per output element of (planes, P, Q).
template <class T>
__global__ void pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                    int32_t* __restrict__ arg, int64_t planes, int64_t P, int64_t Q,
                                    math::PoolGeom g) {
  int64_t total = planes * P * Q;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t pl = k / (P * Q), rem = k % (P * Q), oh = rem / Q, ow = rem % Q;
    T best;
    int64_t at;
    math::pool_window_max(x + pl * g.H * g.W, g, oh, ow, best, at);
    y[k] = best;
    if (arg) arg[k] = static_cast<int32_t>(at);
  }
}

// One thread per input element of (planes, H, W).
template <class T>
__global__ void pool_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ arg,
                                     T* __restrict__ dx, int64_t planes, int64_t P, int64_t Q,
                                     math::PoolGeom g) {
  int64_t total = planes * g.H * g.W;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t pl = k / (g.H * g.W), pos = k % (g.H * g.W), ih = pos / g.W, iw = pos % g.W;
    dx[k] = math::pool_grad_gather(dy + pl * P * Q, arg + pl * P * Q, g, P, Q, ih, iw);
  }
}

math::PoolGeom geom(const Shape& xs, const Pool2dParams& p) {
  return {xs[2], xs[3], p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor* workspace, const Pool2dParams& p) {
  cudaStream_t s = prepare(x);
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  if (workspace && (!workspace->defined() || workspace->shape() != ys ||
                    workspace->dtype() != DType::kInt32 || !(workspace->device() == x.device())))
    *workspace = Tensor::empty(ys, DType::kInt32, x.device());
  int32_t* arg = workspace ? workspace->data<int32_t>() : nullptr;
  int64_t planes = xs[0] * xs[1], total = planes * ys[2] * ys[3];
  if (total == 0) return;
  dispatch_float(x.dtype(), op_name::max_pool2d, [&](auto tag) {
    using T = decltype(tag);
    pool_forward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), arg,
                                                                planes, ys[2], ys[3], geom(xs, p));
    HPCNET_CUDA_LAUNCH(pool_forward_kernel);
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& workspace, Tensor& dx,
                         const Pool2dParams& p) {
  cudaStream_t s = prepare(dy);
  const Shape& xs = dx.shape();
  const Shape& ys = dy.shape();
  HPCNET_CHECK(workspace.defined() && workspace.device() == dy.device() &&
                   workspace.dtype() == DType::kInt32 && workspace.shape() == ys,
               "max_pool2d_backward: the workspace is not the CUDA forward's");
  int64_t planes = xs[0] * xs[1], total = planes * xs[2] * xs[3];
  if (total == 0) return;
  dispatch_float(dy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    pool_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        dy.data<T>(), workspace.data<int32_t>(), dx.data<T>(), planes, ys[2], ys[3], geom(xs, p));
    HPCNET_CUDA_LAUNCH(pool_backward_kernel);
  });
}

}  // namespace hpcnet::cuda
