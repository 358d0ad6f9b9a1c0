// CPU kernels of cat: row-major tensors seen as (outer, D, inner) around the cat dim, so each
// input is `outer` runs of D_i * inner elements at offset (D_0 + ... + D_{i-1}) * inner of the
// output's rows; copied with memcpy, whatever the dtype. OpenMP over rows when they are many.
#include <cstring>

#include "src/ops/backend/cpu/cpu_ops.h"

namespace hpcnet::cpu {
namespace {

constexpr int64_t kParallelBytes = int64_t{1} << 20;

// Product of the sizes of s before dim (outer) and after it (inner).
void outer_inner(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(s.size()); ++d) inner *= s[d];
}

// Copies `rows` runs of `len` bytes from src (runs `src_pitch` apart) to dst (`dst_pitch` apart).
void copy_rows(const char* src, int64_t src_pitch, char* dst, int64_t dst_pitch, int64_t rows,
               int64_t len) {
  if (rows == 0 || len == 0) return;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * len > kParallelBytes)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_pitch, src + r * src_pitch, static_cast<size_t>(len));
}

}  // namespace

void cat_forward(const std::vector<Tensor>& xs, Tensor& y, int64_t dim) {
  int64_t outer, inner;
  outer_inner(y.shape(), dim, outer, inner);
  const int64_t es = static_cast<int64_t>(dtype_size(y.dtype()));
  const int64_t row = y.size(dim) * inner * es;  // bytes of one output run
  char* py = static_cast<char*>(y.raw_data());
  int64_t off = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.size(dim) * inner * es;
    copy_rows(static_cast<const char*>(x.raw_data()), len, py + off, row, outer, len);
    off += len;
  }
}

void cat_backward(const Tensor& dy, const std::vector<int64_t>& sizes, std::vector<Tensor>& dxs,
                  int64_t dim) {
  int64_t outer, inner;
  outer_inner(dy.shape(), dim, outer, inner);
  const int64_t es = static_cast<int64_t>(dtype_size(dy.dtype()));
  const int64_t row = dy.size(dim) * inner * es;
  const char* pdy = static_cast<const char*>(dy.raw_data());
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t len = sizes[i] * inner * es;
    if (dxs[i].defined())
      copy_rows(pdy + off, row, static_cast<char*>(dxs[i].raw_data()), len, outer, len);
    off += len;
  }
}

}  // namespace hpcnet::cpu
