// CPU batched matrix product c (B, M, N) = op(a) op(b): float32 through oneDNN's matmul primitive
// (the transposes are strides of its memory descriptors, so nothing is copied; cached per shape),
// float64 through reference loops (the finite-difference checks), OpenMP over the batch.
#include <cstdint>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/dnnl_util.h"

namespace hpcnet::cpu {
namespace {

using dnnl::memory;

// The (B, rows, cols) matrices of a row-major tensor, read transposed when `t`: the tensor is
// then (B, cols, rows).
memory::desc matrix_md(int64_t batch, int64_t rows, int64_t cols, bool t) {
  const memory::dims strides =
      t ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1};
  return memory::desc({batch, rows, cols}, memory::data_type::f32, strides);
}

void bmm_f64(const double* a, const double* b, double* c, int64_t batch, int64_t m, int64_t k,
             int64_t n, bool ta, bool tb) {
#pragma omp parallel for if (batch * m * n * k > (1 << 18)) schedule(static)
  for (int64_t bi = 0; bi < batch; ++bi) {
    const double* pa = a + bi * m * k;
    const double* pb = b + bi * k * n;
    double* pc = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += (ta ? pa[p * m + i] : pa[i * k + p]) * (tb ? pb[j * k + p] : pb[p * n + j]);
        pc[i * n + j] = acc;
      }
  }
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, Tensor& c, bool transpose_a, bool transpose_b) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2);
  const int64_t k = transpose_a ? a.size(1) : a.size(2);
  if (c.numel() == 0) return;
  if (k == 0) {  // an empty sum
    c.fill_(0.0);
    return;
  }
  if (a.dtype() == DType::kFloat64) {
    bmm_f64(a.data<double>(), b.data<double>(), c.data<double>(), batch, m, k, n, transpose_a,
            transpose_b);
    return;
  }
  DnnlOp& e = dnnl_cached(make_key(40, batch, m, k, n, transpose_a, transpose_b), [&](DnnlOp& op) {
    const memory::desc src = matrix_md(batch, m, k, transpose_a);
    const memory::desc wei = matrix_md(batch, k, n, transpose_b);
    const memory::desc dst = plain_md({batch, m, n});
    op.prim = dnnl::matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), dnnl_engine()));
    op.add_arg(DNNL_ARG_SRC, src);
    op.add_arg(DNNL_ARG_WEIGHTS, wei);
    op.add_arg(DNNL_ARG_DST, dst);
  });
  e.bind(DNNL_ARG_SRC, a);
  e.bind(DNNL_ARG_WEIGHTS, b);
  e.bind(DNNL_ARG_DST, c);
  SmallWorkSerial serial(static_cast<double>(batch) * m * n * k);
  e.run();
}

}  // namespace hpcnet::cpu
