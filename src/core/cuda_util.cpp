// The checking macros' throwers, per-device streams and the deferred-error slots (CUDA build only;
// this file compiles to nothing without HPCNET_WITH_CUDA).
#ifdef HPCNET_WITH_CUDA

#include "src/core/cuda_util.h"

#include <array>
#include <mutex>
#include <string>

namespace hpcnet::cuda {
namespace {

std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " failed at " + file + ":" + std::to_string(line);
}

}  // namespace

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  std::string msg = "CUDA error: " + where(call, file, line) + ": " + cudaGetErrorString(e) + " (" +
                    cudaGetErrorName(e) + ")";
  if (e == cudaErrorMemoryAllocation)
    msg += "; the GPU is out of memory: use a smaller batch or free other GPU processes";
  else if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure)
    msg += "; the CUDA context is now unusable, restart the process";
  throw Error(msg);
}

void throw_cudnn_error(cudnnStatus_t s, const char* call, const char* file, int line) {
  std::string msg = "cuDNN error: " + where(call, file, line) + ": " + cudnnGetErrorString(s);
  if (s == CUDNN_STATUS_EXECUTION_FAILED || s == CUDNN_STATUS_INTERNAL_ERROR) {
    char buf[512] = {0};
    cudnnGetLastErrorString(buf, sizeof(buf));
    if (buf[0]) msg += std::string(" (") + buf + ")";
  }
  throw Error(msg);
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw Error("cuBLAS error: " + where(call, file, line) + ": " + cublasLtGetStatusName(s) + " (" +
              cublasLtGetStatusString(s) + ")");
}

void set_device(int index) {
  int cur = -1;
  HPCNET_CUDA(cudaGetDevice(&cur));
  if (cur != index) HPCNET_CUDA(cudaSetDevice(index));
}

namespace {

struct PerDevice {
  std::mutex mu;
  std::array<cudaStream_t, kMaxDevices> streams{};
  std::array<DeviceErrorSlot*, kMaxDevices> host_slots{};  // mapped pinned memory
  std::array<DeviceErrorSlot*, kMaxDevices> dev_slots{};
};
PerDevice& per_device() {
  static PerDevice* p = new PerDevice();  // never destroyed: work may be in flight at exit
  return *p;
}

void check_index(int index) {
  if (index < 0 || index >= kMaxDevices)
    throw Error("CUDA device index " + std::to_string(index) + " is out of range [0, " +
                std::to_string(kMaxDevices) + ")");
}

}  // namespace

cudaStream_t stream(int index) {
  check_index(index);
  PerDevice& d = per_device();
  // Streams are created once and never destroyed, so a racy read of a set entry is safe.
  if (cudaStream_t s = __atomic_load_n(&d.streams[index], __ATOMIC_ACQUIRE)) return s;
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.streams[index]) {
    set_device(index);
    cudaStream_t s = nullptr;
    HPCNET_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    __atomic_store_n(&d.streams[index], s, __ATOMIC_RELEASE);
  }
  return d.streams[index];
}

namespace {
DeviceErrorSlot* host_slot(int index) {
  check_index(index);
  PerDevice& d = per_device();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.host_slots[index]) {
    set_device(index);
    void* h = nullptr;
    HPCNET_CUDA(cudaHostAlloc(&h, sizeof(DeviceErrorSlot), cudaHostAllocMapped));
    auto* slot = static_cast<DeviceErrorSlot*>(h);
    *slot = DeviceErrorSlot{};
    void* dp = nullptr;
    HPCNET_CUDA(cudaHostGetDevicePointer(&dp, h, 0));
    d.dev_slots[index] = static_cast<DeviceErrorSlot*>(dp);
    d.host_slots[index] = slot;
  }
  return d.host_slots[index];
}
}  // namespace

DeviceErrorSlot* error_slot(int index) {
  host_slot(index);
  return per_device().dev_slots[index];
}

void raise_deferred_errors(int index) {
  PerDevice& d = per_device();
  DeviceErrorSlot* slot;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (index < 0 || index >= kMaxDevices || !d.host_slots[index]) return;
    slot = d.host_slots[index];
  }
  volatile DeviceErrorSlot* v = slot;
  if (v->flag == 0) return;
  int64_t row = v->row, value = v->value, limit = v->limit;
  v->flag = 0;
  throw InputError("label " + std::to_string(value) + " of sample " + std::to_string(row) +
                   " is out of range [0, " + std::to_string(limit) + ") (found on cuda:" +
                   std::to_string(index) + " by an earlier loss kernel; its loss is NaN)");
}

}  // namespace hpcnet::cuda

#endif  // HPCNET_WITH_CUDA
