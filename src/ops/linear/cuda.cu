// CUDA fully-connected layer through cuBLASLt: the forward with bias and ReLU fused as epilogues
// (CUBLASLT_EPILOGUE_BIAS / RELU / RELU_BIAS) where the heuristic offers an algorithm for them,
// else a plain product and bias.cu's epilogue kernel; backward data and weights as products; the
// bias gradient by bias.cu's deterministic column sum. Row-major (N, IN) / (OUT, IN) tensors are
// read as column-major transposes, so no data moves:
//   forward   y^T (OUT, N)  = W (OUT, IN)   x^T (IN, N)     A = w (trans), B = x
//   data      dx^T (IN, N)  = W^T (IN, OUT) dy^T (OUT, N)   A = w, B = dy
//   weights   dW^T (IN, OUT) = x^T (IN, N)  dy (N, OUT)     A = x, B = dy (trans)
// float32 computes in FP32 (CUBLAS_COMPUTE_32F) unless set_allow_tf32(true); float64 in FP64.
// Plans (descriptors, layouts, the chosen algorithm) are cached per thread by shape.
#include <memory>
#include <unordered_map>

#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

enum Kind { kForward = 0, kBackwardData = 1, kBackwardWeights = 2 };

struct MatmulPlan : LtMatmulPlan {
  bool epilogue_fused = false;  // the bias/relu epilogue runs inside cuBLASLt
};

struct Dims {
  uint64_t a_rows, a_cols, b_rows, b_cols, d_rows, d_cols;
  cublasOperation_t ta, tb;
};

// The column-major views of each kind (see the file comment).
Dims dims_for(Kind kind, int64_t n, int64_t in, int64_t out) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  switch (kind) {
    case kForward:
      return {u(in), u(out), u(in), u(n), u(out), u(n), CUBLAS_OP_T, CUBLAS_OP_N};
    case kBackwardData:
      return {u(in), u(out), u(out), u(n), u(in), u(n), CUBLAS_OP_N, CUBLAS_OP_N};
    default:
      return {u(in), u(n), u(out), u(n), u(in), u(out), CUBLAS_OP_N, CUBLAS_OP_T};
  }
}

cublasLtEpilogue_t epilogue_for(bool bias, bool relu) {
  if (bias && relu) return CUBLASLT_EPILOGUE_RELU_BIAS;
  if (bias) return CUBLASLT_EPILOGUE_BIAS;
  if (relu) return CUBLASLT_EPILOGUE_RELU;
  return CUBLASLT_EPILOGUE_DEFAULT;
}

std::unique_ptr<MatmulPlan> make_plan(cublasLtHandle_t lt, Kind kind, DType dtype, int64_t n,
                                      int64_t in, int64_t out, bool bias, bool relu,
                                      const uint32_t align[3]) {
  const bool f64 = dtype == DType::kFloat64;
  cudaDataType_t dt = f64 ? CUDA_R_64F : CUDA_R_32F;
  cublasComputeType_t ct = lt_compute_type(dtype);
  Dims dm = dims_for(kind, n, in, out);
  auto p = std::make_unique<MatmulPlan>();
  HPCNET_CUBLAS(cublasLtMatmulDescCreate(&p->desc, ct, dt));
  HPCNET_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &dm.ta, sizeof(dm.ta)));
  HPCNET_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &dm.tb, sizeof(dm.tb)));
  HPCNET_CUBLAS(
      cublasLtMatrixLayoutCreate(&p->a, dt, dm.a_rows, dm.a_cols, static_cast<int64_t>(dm.a_rows)));
  HPCNET_CUBLAS(
      cublasLtMatrixLayoutCreate(&p->b, dt, dm.b_rows, dm.b_cols, static_cast<int64_t>(dm.b_rows)));
  HPCNET_CUBLAS(
      cublasLtMatrixLayoutCreate(&p->d, dt, dm.d_rows, dm.d_cols, static_cast<int64_t>(dm.d_rows)));
  cublasLtEpilogue_t epi = epilogue_for(bias, relu);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    HPCNET_CUBLAS(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) {
      cudaDataType_t bt = dt;
      HPCNET_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bt, sizeof(bt)));
    }
    if (lt_pick_algo(lt, *p, align)) {
      p->epilogue_fused = true;
      return p;
    }
    epi = CUBLASLT_EPILOGUE_DEFAULT;  // no fused algorithm: plain product + bias.cu
    HPCNET_CUBLAS(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  if (!lt_pick_algo(lt, *p, align))
    throw Error("linear: cuBLASLt offers no algorithm for (N=" + std::to_string(n) +
                ", IN=" + std::to_string(in) + ", OUT=" + std::to_string(out) + ", " +
                dtype_name(dtype) + ", kind " + std::to_string(kind) + ")");
  return p;
}

MatmulPlan& plan_for(int device, Kind kind, DType dtype, int64_t n, int64_t in, int64_t out,
                     bool bias, bool relu, const uint32_t align[3]) {
  thread_local auto* cache =
      new std::unordered_map<PlanKey, std::unique_ptr<MatmulPlan>, PlanKeyHash>();
  PlanKey key = make_plan_key(kind, device, static_cast<int>(dtype), n, in, out, bias, relu,
                              align[0], align[1], align[2], allow_tf32());
  auto it = cache->find(key);
  if (it != cache->end()) return *it->second;
  auto p = make_plan(cublaslt_handle(device), kind, dtype, n, in, out, bias, relu, align);
  return *cache->emplace(key, std::move(p)).first->second;
}

// D = op(A) op(B) through the plan (bias pointer set when the plan fuses it).
void run(MatmulPlan& p, int device, cudaStream_t s, DType dtype, const void* A, const void* B,
         void* D, const void* bias) {
  if (p.epilogue_fused && bias)
    HPCNET_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof(bias)));
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = dtype == DType::kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  HPCNET_CUBLAS(cublasLtMatmul(cublaslt_handle(device), p.desc, alpha, A, p.a, B, p.b, beta, D, p.d,
                               D, p.d, &p.algo, cublaslt_workspace(device), kCublasLtWorkspace, s));
}

void check_float(const Tensor& t, const char* op) {
  dispatch_float(t.dtype(), op, [](auto) {});
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, bool relu) {
  check_float(x, op_name::linear);
  cudaStream_t s = prepare(x);
  int dev = x.device().index;
  int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  bool has_b = b.defined();
  if (n == 0 || out == 0) return;
  if (in == 0) {  // an empty product: y = b (or 0), relu'd
    y.fill_(0.0);
    if (has_b) add_bias_act(y, b, n, out, 1, relu);
    return;
  }
  uint32_t align[3] = {alignment_of(w.raw_data()), alignment_of(x.raw_data()),
                       alignment_of(y.raw_data())};
  MatmulPlan& p = plan_for(dev, kForward, x.dtype(), n, in, out, has_b, relu, align);
  run(p, dev, s, x.dtype(), w.raw_data(), x.raw_data(), y.raw_data(),
      has_b ? b.raw_data() : nullptr);
  if (!p.epilogue_fused) {
    if (has_b)
      add_bias_act(y, b, n, out, 1, relu);
    else if (relu)
      relu_forward(y, y);
  }
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  check_float(dy, "linear_backward_data");
  cudaStream_t s = prepare(dy);
  int dev = dy.device().index;
  int64_t n = dy.size(0), out = w.size(0), in = w.size(1);
  if (n == 0 || in == 0) return;
  if (out == 0) {
    dx.fill_(0.0);
    return;
  }
  uint32_t align[3] = {alignment_of(w.raw_data()), alignment_of(dy.raw_data()),
                       alignment_of(dx.raw_data())};
  MatmulPlan& p = plan_for(dev, kBackwardData, dy.dtype(), n, in, out, false, false, align);
  run(p, dev, s, dy.dtype(), w.raw_data(), dy.raw_data(), dx.raw_data(), nullptr);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  check_float(x, "linear_backward_weights");
  cudaStream_t s = prepare(x);
  int dev = x.device().index;
  int64_t n = x.size(0), in = x.size(1), out = dw.size(0);
  if (db.defined()) bias_grad(dy, db, n, out, 1);
  if (in == 0 || out == 0) return;
  if (n == 0) {
    dw.fill_(0.0);
    return;
  }
  uint32_t align[3] = {alignment_of(x.raw_data()), alignment_of(dy.raw_data()),
                       alignment_of(dw.raw_data())};
  MatmulPlan& p = plan_for(dev, kBackwardWeights, x.dtype(), n, in, out, false, false, align);
  run(p, dev, s, x.dtype(), x.raw_data(), dy.raw_data(), dw.raw_data(), nullptr);
}

}  // namespace hpcnet::cuda
