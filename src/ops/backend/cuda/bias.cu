// Bias epilogues shared by conv2d.cu and linear.cu where cuDNN or cuBLASLt do not fuse them:
// y += b (with an optional relu) over (outer, C, inner), and the bias gradient, one block per
// channel summing in double in a fixed order (deterministic, like the CPU's reference sums).
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/elementwise/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void bias_act_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t total,
                                int64_t channels, int64_t inner, bool relu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = math::bias_act(y[i], b[(i / inner) % channels], relu);
}

// Block k: db[k] = sum over o < outer, j < inner of dy[(o * C + k) * inner + j].
template <class T>
__global__ void bias_grad_kernel(const T* __restrict__ dy, T* __restrict__ db, int64_t outer,
                                 int64_t channels, int64_t inner) {
  __shared__ double part[kThreads];
  int64_t k = blockIdx.x;
  double acc = 0;
  for (int64_t e = threadIdx.x; e < outer * inner; e += blockDim.x) {
    int64_t o = e / inner, j = e % inner;
    acc += static_cast<double>(dy[(o * channels + k) * inner + j]);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[k] = static_cast<T>(part[0]);
}

}  // namespace

void add_bias_act(Tensor& y, const Tensor& b, int64_t outer, int64_t channels, int64_t inner,
                  bool relu) {
  cudaStream_t s = prepare(y);
  int64_t total = outer * channels * inner;
  if (total == 0) return;
  dispatch_float(y.dtype(), "bias epilogue", [&](auto tag) {
    using T = decltype(tag);
    bias_act_kernel<T><<<grid_for(total), kThreads, 0, s>>>(y.data<T>(), b.data<T>(), total,
                                                            channels, inner, relu);
    HPCNET_CUDA_LAUNCH(bias_act_kernel);
  });
}

void bias_grad(const Tensor& dy, Tensor& db, int64_t outer, int64_t channels, int64_t inner) {
  cudaStream_t s = prepare(dy);
  if (channels == 0) return;
  dispatch_float(dy.dtype(), "bias gradient", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_kernel<T><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(
        dy.data<T>(), db.data<T>(), outer, channels, inner);
    HPCNET_CUDA_LAUNCH(bias_grad_kernel);
  });
}

}  // namespace hpcnet::cuda
