// Handles, workspaces and the TF32 switch for the CUDA kernels. cuDNN and cuBLASLt handles are
// per thread and device (neither is meant for concurrent use from several threads) and bound to
// the device's stream; they and the cuBLASLt workspaces live until the process ends.
#include <array>
#include <atomic>
#include <mutex>

#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_deterministic{true};

struct ThreadHandles {
  std::array<cudnnHandle_t, kMaxDevices> dnn{};
  std::array<cublasLtHandle_t, kMaxDevices> lt{};
};
ThreadHandles& thread_handles() {
  thread_local ThreadHandles* h = new ThreadHandles();  // never destroyed (see above)
  return *h;
}

void check_index(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw Error("CUDA device index " + std::to_string(device) + " is out of range");
}

}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool allow_tf32() { return g_allow_tf32.load(); }
void set_deterministic(bool on) { g_deterministic.store(on); }
bool deterministic() { return g_deterministic.load(); }

cudaStream_t prepare(const Tensor& t) {
  int d = t.device().index;
  set_device(d);
  return stream(d);
}

cudnnHandle_t cudnn_handle(int device) {
  check_index(device);
  cudnnHandle_t& h = thread_handles().dnn[device];
  if (!h) {
    set_device(device);
    HPCNET_CUDNN(cudnnCreate(&h));
    HPCNET_CUDNN(cudnnSetStream(h, stream(device)));
  }
  return h;
}

cublasLtHandle_t cublaslt_handle(int device) {
  check_index(device);
  cublasLtHandle_t& h = thread_handles().lt[device];
  if (!h) {
    set_device(device);
    HPCNET_CUBLAS(cublasLtCreate(&h));
  }
  return h;
}

void* cublaslt_workspace(int device) {
  check_index(device);
  static std::mutex mu;
  static std::array<void*, kMaxDevices> ws{};
  std::lock_guard<std::mutex> lock(mu);
  if (!ws[device]) ws[device] = cuda_cached_alloc(kCublasLtWorkspace, device);
  return ws[device];
}

LtMatmulPlan::~LtMatmulPlan() {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

cublasComputeType_t lt_compute_type(DType dtype) {
  if (dtype == DType::kFloat64) return CUBLAS_COMPUTE_64F;
  return allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

bool lt_pick_algo(cublasLtHandle_t lt, LtMatmulPlan& p, const uint32_t align[3]) {
  cublasLtMatmulPreference_t pref = nullptr;
  HPCNET_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kCublasLtWorkspace;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t al[4] = {align[0], align[1], align[2], align[2]};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &al[i], sizeof(al[i]));
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  HPCNET_CUBLAS(st);
  if (count < 1 || res.state != CUBLAS_STATUS_SUCCESS) return false;
  p.algo = res.algo;
  return true;
}

}  // namespace hpcnet::cuda
