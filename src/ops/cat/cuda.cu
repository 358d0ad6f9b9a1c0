// CUDA kernels of cat, with the CPU kernels' view (src/ops/cat/cpu.cpp): row-major tensors as
// (outer, D, inner) around the cat dim; one launch per input copies its `outer` runs of
// D_i * inner elements into (or, backward, out of) the output's rows. Elements are moved as
// unsigned integers of the dtype's size, so every dtype is supported.
#include <cstdint>

#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;

// dst[r * dst_pitch + c] = src[r * src_pitch + c] for r < rows, c < len (pitches in elements).
template <class U>
__global__ void copy_rows_kernel(const U* __restrict__ src, int64_t src_pitch, U* __restrict__ dst,
                                 int64_t dst_pitch, int64_t rows, int64_t len) {
  const int64_t total = rows * len;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t r = k / len, c = k % len;
    dst[r * dst_pitch + c] = src[r * src_pitch + c];
  }
}

// Calls f(U{}) with an unsigned type of `bytes` bytes (a dtype's element size).
template <class F>
void dispatch_elem_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 8:
      f(uint64_t{});
      break;
    default:
      throw Error("cat: CUDA kernel for elements of " + std::to_string(bytes) +
                  " bytes is not implemented");
  }
}

void copy_rows(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t rows,
               int64_t len, size_t es, cudaStream_t s) {
  if (rows == 0 || len == 0) return;
  dispatch_elem_size(es, [&](auto tag) {
    using U = decltype(tag);
    copy_rows_kernel<U><<<grid_for(rows * len), kThreads, 0, s>>>(
        static_cast<const U*>(src), src_pitch, static_cast<U*>(dst), dst_pitch, rows, len);
    HPCNET_CUDA_LAUNCH(copy_rows_kernel);
  });
}

void outer_inner(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(s.size()); ++d) inner *= s[d];
}

}  // namespace

void cat_forward(const std::vector<Tensor>& xs, Tensor& y, int64_t dim) {
  cudaStream_t s = prepare(y);
  int64_t outer, inner;
  outer_inner(y.shape(), dim, outer, inner);
  const size_t es = dtype_size(y.dtype());
  const int64_t row = y.size(dim) * inner;  // elements of one output run
  char* py = static_cast<char*>(y.raw_data());
  int64_t off = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.size(dim) * inner;
    copy_rows(x.raw_data(), len, py + off * es, row, outer, len, es, s);
    off += len;
  }
}

void cat_backward(const Tensor& dy, const std::vector<int64_t>& sizes, std::vector<Tensor>& dxs,
                  int64_t dim) {
  cudaStream_t s = prepare(dy);
  int64_t outer, inner;
  outer_inner(dy.shape(), dim, outer, inner);
  const size_t es = dtype_size(dy.dtype());
  const int64_t row = dy.size(dim) * inner;
  const char* pdy = static_cast<const char*>(dy.raw_data());
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t len = sizes[i] * inner;
    if (dxs[i].defined()) copy_rows(pdy + off * es, row, dxs[i].raw_data(), len, outer, len, es, s);
    off += len;
  }
}

}  // namespace hpcnet::cuda
