// CUDA batched matrix product through cuBLASLt, strided-batched (BATCH_COUNT and
// STRIDED_BATCH_OFFSET on each layout). Row-major c (M, N) = op(a) op(b) is computed as the
// column-major c^T (N, M) = op(b)^T op(a)^T, so no data moves:
//   cuBLAS A = b: (N, K) column-major with ld N, op N; transposed, (K, N) with ld K, op T;
//   cuBLAS B = a: (K, M) column-major with ld K, op N; transposed, (M, K) with ld M, op T;
//   D = c: (N, M) column-major with ld N.
// float32 computes in FP32 (TF32 only with set_allow_tf32(true)), float64 in FP64. Plans
// (descriptors, layouts, the chosen algorithm) are cached per thread by shape and alignment.
#include <memory>
#include <string>
#include <unordered_map>

#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

using BmmPlan = LtMatmulPlan;

// A (rows, cols) column-major layout with ld = rows, `batch` of them `rows cols` apart.
cublasLtMatrixLayout_t batched_layout(cudaDataType_t dt, int64_t rows, int64_t cols,
                                      int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  HPCNET_CUBLAS(cublasLtMatrixLayoutCreate(&l, dt, static_cast<uint64_t>(rows),
                                           static_cast<uint64_t>(cols), rows));
  const int32_t count = static_cast<int32_t>(batch);
  const int64_t offset = rows * cols;
  HPCNET_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                 sizeof(count)));
  HPCNET_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &offset, sizeof(offset)));
  return l;
}

// The alignment every matrix of a batch keeps: the base's and that of the batch offset in bytes.
uint32_t batch_alignment(const void* p, int64_t offset_bytes) {
  uint32_t al = alignment_of(p);
  while (al > 1 && offset_bytes % al != 0) al >>= 1;
  return al;
}

std::unique_ptr<BmmPlan> make_plan(cublasLtHandle_t lt, DType dtype, int64_t batch, int64_t m,
                                   int64_t k, int64_t n, bool ta, bool tb, const uint32_t al[3]) {
  const bool f64 = dtype == DType::kFloat64;
  const cudaDataType_t dt = f64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t ct = lt_compute_type(dtype);
  auto p = std::make_unique<BmmPlan>();
  HPCNET_CUBLAS(cublasLtMatmulDescCreate(&p->desc, ct, dt));
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A is b
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B is a
  HPCNET_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  HPCNET_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  p->a = tb ? batched_layout(dt, k, n, batch) : batched_layout(dt, n, k, batch);
  p->b = ta ? batched_layout(dt, m, k, batch) : batched_layout(dt, k, m, batch);
  p->d = batched_layout(dt, n, m, batch);

  if (!lt_pick_algo(lt, *p, al))
    throw Error(std::string(op_name::bmm) + ": cuBLASLt offers no algorithm for (B=" +
                std::to_string(batch) + ", M=" + std::to_string(m) + ", K=" + std::to_string(k) +
                ", N=" + std::to_string(n) + ", " + dtype_name(dtype) + ")");
  return p;
}

BmmPlan& plan_for(int device, DType dtype, int64_t batch, int64_t m, int64_t k, int64_t n, bool ta,
                  bool tb, const uint32_t al[3]) {
  thread_local auto* cache =
      new std::unordered_map<PlanKey, std::unique_ptr<BmmPlan>, PlanKeyHash>();
  const PlanKey key = make_plan_key(device, static_cast<int>(dtype), batch, m, k, n, ta, tb, al[0],
                                    al[1], al[2], allow_tf32());
  auto it = cache->find(key);
  if (it != cache->end()) return *it->second;
  auto p = make_plan(cublaslt_handle(device), dtype, batch, m, k, n, ta, tb, al);
  return *cache->emplace(key, std::move(p)).first->second;
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, Tensor& c, bool transpose_a, bool transpose_b) {
  dispatch_float(a.dtype(), op_name::bmm, [](auto) {});
  cudaStream_t s = prepare(a);
  const int dev = a.device().index;
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2);
  const int64_t k = transpose_a ? a.size(1) : a.size(2);
  if (c.numel() == 0) return;
  if (k == 0) {  // an empty sum
    c.fill_(0.0);
    return;
  }
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype()));
  const uint32_t al[3] = {batch_alignment(b.raw_data(), k * n * es),
                          batch_alignment(a.raw_data(), m * k * es),
                          batch_alignment(c.raw_data(), m * n * es)};
  BmmPlan& p = plan_for(dev, a.dtype(), batch, m, k, n, transpose_a, transpose_b, al);
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = a.dtype() == DType::kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  HPCNET_CUBLAS(cublasLtMatmul(cublaslt_handle(dev), p.desc, alpha, b.raw_data(), p.a, a.raw_data(),
                               p.b, beta, c.raw_data(), p.d, c.raw_data(), p.d, &p.algo,
                               cublaslt_workspace(dev), kCublasLtWorkspace, s));
}

}  // namespace hpcnet::cuda
