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

}  // namespace hpcnet::cuda
