// CUDA elementwise ops and reductions: relu, add, scale, sum, mean and the fill used by their
// backward. Contiguous tensors; the arithmetic is src/ops/elementwise/math.h's. Reductions run in
// one block with a fixed order (deterministic) and accumulate in double, as the CPU does.
#include <cmath>

#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/elementwise/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

#define HPCNET_GRID_STRIDE(i, n)                                            \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <class T>
__global__ void relu_kernel(const T* x, T* y, int64_t n) {  // x and y may alias
  HPCNET_GRID_STRIDE(i, n) y[i] = math::relu(x[i]);
}

template <class T>
__global__ void relu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                     T* __restrict__ dx, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) dx[i] = math::relu_grad(dy[i], y[i]);
}

// out may alias a (add_inplace), so no __restrict__ here.
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) out[i] = math::add(a[i], b[i]);
}

template <class T>
__global__ void scale_kernel(const T* x, T s, T* out, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) out[i] = math::scale(x[i], s);
}

template <class T>
__global__ void silu_kernel(const T* x, T* y, int64_t n) {  // x and y may alias
  HPCNET_GRID_STRIDE(i, n) y[i] = math::silu(x[i]);
}
template <class T>
__global__ void silu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     T* __restrict__ dx, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) dx[i] = math::silu_grad(dy[i], x[i]);
}
template <class T>
__global__ void sigmoid_kernel(const T* x, T* y, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) y[i] = math::sigmoid(x[i]);
}
template <class T>
__global__ void sigmoid_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                        T* __restrict__ dx, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) dx[i] = math::sigmoid_grad(dy[i], y[i]);
}
template <class T>
__global__ void mul_kernel(const T* a, const T* b, T* out, int64_t n) {
  HPCNET_GRID_STRIDE(i, n) out[i] = math::mul(a[i], b[i]);
}

// One block: y[0] = sum(x) (or mean), summed in double in a fixed order.
template <class T>
__global__ void sum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, bool mean) {
  __shared__ double part[kReduceThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += static_cast<double>(x[i]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double total = part[0];
    y[0] = static_cast<T>(mean ? (n ? total / static_cast<double>(n) : NAN) : total);
  }
}

// dx[:] = dy[0] * factor (dy read on the device: no host synchronisation).
template <class T>
__global__ void fill_like_kernel(const T* __restrict__ dy, double factor, T* __restrict__ dx,
                                 int64_t n) {
  T v = static_cast<T>(dy[0] * factor);
  HPCNET_GRID_STRIDE(i, n) dx[i] = v;
}

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::relu, [&](auto tag) {
    using T = decltype(tag);
    relu_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), n);
    HPCNET_CUDA_LAUNCH(relu_kernel);
  });
}

void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  cudaStream_t s = prepare(dy);
  int64_t n = dy.numel();
  if (n == 0) return;
  dispatch_float(dy.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    relu_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), y.data<T>(), dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(relu_backward_kernel);
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  cudaStream_t s = prepare(a);
  int64_t n = a.numel();
  if (n == 0) return;
  dispatch_float(a.dtype(), op_name::add, [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(a.data<T>(), b.data<T>(), out.data<T>(), n);
    HPCNET_CUDA_LAUNCH(add_kernel);
  });
}

void add_inplace(Tensor& a, const Tensor& b) { add(a, b, a); }

void scale(const Tensor& x, double f, Tensor& out) {
  cudaStream_t s = prepare(x);
  int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), static_cast<T>(f), out.data<T>(), n);
    HPCNET_CUDA_LAUNCH(scale_kernel);
  });
}

void silu_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::silu, [&](auto tag) {
    using T = decltype(tag);
    silu_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), n);
    HPCNET_CUDA_LAUNCH(silu_kernel);
  });
}

void silu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  cudaStream_t s = prepare(dy);
  int64_t n = dy.numel();
  if (n == 0) return;
  dispatch_float(dy.dtype(), "silu_backward", [&](auto tag) {
    using T = decltype(tag);
    silu_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), x.data<T>(), dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(silu_backward_kernel);
  });
}

void sigmoid_forward(const Tensor& x, Tensor& y) {
  cudaStream_t s = prepare(x);
  int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), op_name::sigmoid, [&](auto tag) {
    using T = decltype(tag);
    sigmoid_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x.data<T>(), y.data<T>(), n);
    HPCNET_CUDA_LAUNCH(sigmoid_kernel);
  });
}

void sigmoid_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  cudaStream_t s = prepare(dy);
  int64_t n = dy.numel();
  if (n == 0) return;
  dispatch_float(dy.dtype(), "sigmoid_backward", [&](auto tag) {
    using T = decltype(tag);
    sigmoid_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), y.data<T>(), dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(sigmoid_backward_kernel);
  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  cudaStream_t s = prepare(a);
  int64_t n = a.numel();
  if (n == 0) return;
  dispatch_float(a.dtype(), op_name::mul, [&](auto tag) {
    using T = decltype(tag);
    mul_kernel<T><<<grid_for(n), kThreads, 0, s>>>(a.data<T>(), b.data<T>(), out.data<T>(), n);
    HPCNET_CUDA_LAUNCH(mul_kernel);
  });
}

namespace {
void reduce(const Tensor& x, Tensor& y, bool mean, const char* op) {
  cudaStream_t s = prepare(x);
  int64_t n = x.numel();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    sum_kernel<T><<<1, kReduceThreads, 0, s>>>(x.data<T>(), y.data<T>(), n, mean);
    HPCNET_CUDA_LAUNCH(sum_kernel);
  });
}
}  // namespace

void sum_forward(const Tensor& x, Tensor& y) { reduce(x, y, false, op_name::sum); }
void mean_forward(const Tensor& x, Tensor& y) { reduce(x, y, true, op_name::mean); }

void fill_like_backward(const Tensor& dy, double factor, Tensor& dx) {
  cudaStream_t s = prepare(dx);
  int64_t n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype(), "fill_like_backward", [&](auto tag) {
    using T = decltype(tag);
    fill_like_kernel<T><<<grid_for(n), kThreads, 0, s>>>(dy.data<T>(), factor, dx.data<T>(), n);
    HPCNET_CUDA_LAUNCH(fill_like_kernel);
  });
}

}  // namespace hpcnet::cuda
