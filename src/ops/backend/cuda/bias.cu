// Bias epilogues shared by conv2d.cu and linear.cu where cuDNN or cuBLASLt do not fuse them:
// y += b (with an optional relu) over (outer, C, inner), and the bias gradient, one block per
// channel summing in double in a fixed order (deterministic, like the CPU's reference sums); and
// the bfloat16 conversions around cuDNN's bfloat16 convolutions (src/core/bf16.h's rounding,
// the CPU's), the bias epilogue fused into the conversion back to float32.
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

__global__ void to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = math::float_to_bf16(x[i]);
}

// y = float(yb) (+ b[channel]), then relu when asked; b may be null.
__global__ void from_bf16_bias_act_kernel(const uint16_t* __restrict__ yb, float* __restrict__ y,
                                          const float* __restrict__ b, int64_t total,
                                          int64_t channels, int64_t inner, bool relu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = math::bf16_to_float(yb[i]);
    y[i] = math::bias_act(v, b ? b[(i / inner) % channels] : 0.f, relu);
  }
}

// An element as double: float and double as they are, bfloat16 (its bits) widened exactly.
HPCNET_HD double as_double(float v) { return v; }
HPCNET_HD double as_double(double v) { return v; }
HPCNET_HD double as_double(uint16_t v) { return math::bf16_to_float(v); }

// Block k: db[k] = sum over o < outer, j < inner of dy[(o * C + k) * inner + j].
template <class S, class T>
__global__ void bias_grad_kernel(const S* __restrict__ dy, T* __restrict__ db, int64_t outer,
                                 int64_t channels, int64_t inner) {
  __shared__ double part[kThreads];
  int64_t k = blockIdx.x;
  double acc = 0;
  for (int64_t e = threadIdx.x; e < outer * inner; e += blockDim.x) {
    int64_t o = e / inner, j = e % inner;
    acc += as_double(dy[(o * channels + k) * inner + j]);
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
  if (dy.dtype() == DType::kBFloat16) {  // a bfloat16 convolution's dy, a float32 bias
    HPCNET_CHECK(db.dtype() == DType::kFloat32, "bias gradient: bfloat16 dy needs a float32 db");
    bias_grad_kernel<uint16_t, float><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(dy.raw_data()), db.data<float>(), outer, channels, inner);
    HPCNET_CUDA_LAUNCH(bias_grad_kernel);
    return;
  }
  dispatch_float(dy.dtype(), "bias gradient", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_kernel<T, T><<<static_cast<unsigned>(channels), kThreads, 0, s>>>(
        dy.data<T>(), db.data<T>(), outer, channels, inner);
    HPCNET_CUDA_LAUNCH(bias_grad_kernel);
  });
}

void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  HPCNET_CUDA_LAUNCH(to_bf16_kernel);
}

void bf16_to_f32_bias_act(const uint16_t* yb, float* y, const float* b, int64_t outer,
                          int64_t channels, int64_t inner, bool relu, cudaStream_t s) {
  const int64_t total = outer * channels * inner;
  if (total == 0) return;
  from_bf16_bias_act_kernel<<<grid_for(total), kThreads, 0, s>>>(yb, y, b, total, channels, inner,
                                                                 relu);
  HPCNET_CUDA_LAUNCH(from_bf16_bias_act_kernel);
}

}  // namespace hpcnet::cuda
