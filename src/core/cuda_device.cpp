// cuda_available() and friends, device description, synchronisation and cross-device copies.
// Compiled in every build; without HPCNET_WITH_CUDA the answers say so and memory calls throw.
#include "src/core/cuda_device.h"

#include <cstdio>
#include <cstring>
#include <mutex>

#ifdef HPCNET_WITH_CUDA
#include "src/core/cuda_util.h"
#endif

namespace hpcnet {

#ifndef HPCNET_WITH_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) +
              ": this build has no CUDA backend (configure with -DHPCNET_CUDA=ON where the CUDA "
              "toolkit is installed), use the CPU device");
}
}  // namespace

bool cuda_built() { return false; }
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "this build has no CUDA backend (configure with -DHPCNET_CUDA=ON)";
}
std::string cuda_describe() { return cuda_unavailable_reason(); }
void cuda_synchronize(Device) { no_cuda("cuda_synchronize"); }
void* cuda_cached_alloc(size_t, int) { no_cuda("CUDA memory"); }
void cuda_cached_free(void*, size_t, int) {}
AllocatorStats cuda_allocator_stats(int) { return {}; }
void cuda_allocator_release_cached() {}
void cuda_copy_bytes(void*, Device, const void*, Device, size_t) {
  no_cuda("copy to or from CUDA");
}
void cuda_fill_bytes(void*, Device, const void*, size_t, int64_t) { no_cuda("fill on CUDA"); }

#else  // HPCNET_WITH_CUDA

namespace {

std::string version_str(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky, but leave nothing behind
      r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" +
                 cudaGetErrorName(e) + ")";
      if (e == cudaErrorInsufficientDriver)
        r.reason +=
            "; no NVIDIA driver was found, or it is older than CUDA " + version_str(CUDART_VERSION);
      else if (e == cudaErrorNoDevice)
        r.reason += "; no GPU is visible (check CUDA_VISIBLE_DEVICES)";
      return r;
    }
    if (n <= 0) {
      r.reason = "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
      return r;
    }
    r.count = n > cuda::kMaxDevices ? cuda::kMaxDevices : n;
    return r;
  }();
  return p;
}

void check_device(Device d) {
  if (!d.is_cuda()) return;
  if (!cuda_available())
    throw Error("cuda:" + std::to_string(d.index) + " is not usable: " + cuda_unavailable_reason());
  if (d.index < 0 || d.index >= cuda_device_count())
    throw Error("cuda:" + std::to_string(d.index) + " does not exist (" +
                std::to_string(cuda_device_count()) + " visible)");
}

}  // namespace

bool cuda_built() { return true; }
bool cuda_available() { return probe().count > 0; }
int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

std::string cuda_describe() {
  if (!cuda_available()) return cuda_unavailable_reason();
  std::string out;
  for (int i = 0; i < cuda_device_count(); ++i) {
    cudaDeviceProp p{};
    HPCNET_CUDA(cudaGetDeviceProperties(&p, i));
    char gib[32];
    std::snprintf(gib, sizeof(gib), "%.1f",
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    out += "cuda:" + std::to_string(i) + " " + p.name + ", sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " + gib +
           " GiB\n";
  }
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  size_t dnn = cudnnGetVersion();
  out += "driver " + version_str(drv) + ", runtime " + version_str(rt) + ", cuDNN " +
         std::to_string(dnn / 10000) + "." + std::to_string((dnn % 10000) / 100) + "." +
         std::to_string(dnn % 100) + ", cuBLASLt " + std::to_string(cublasLtGetVersion());
  return out;
}

void cuda_synchronize(Device d) {
  if (!d.is_cuda()) return;
  check_device(d);
  cuda::set_device(d.index);
  HPCNET_CUDA(cudaStreamSynchronize(cuda::stream(d.index)));
  cuda::raise_deferred_errors(d.index);
}

void cuda_copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t n) {
  check_device(dd);
  check_device(sd);
  if (n == 0) return;
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memmove(dst, src, n);
    return;
  }
  // The stream of the device involved (the destination's for device-to-device copies).
  int index = dd.is_cuda() ? dd.index : sd.index;
  cuda::set_device(index);
  cudaStream_t s = cuda::stream(index);
  if (dd.is_cuda() && sd.is_cuda() && dd.index != sd.index) {
    // Peer copy: wait for the source's queued writes first.
    HPCNET_CUDA(cudaStreamSynchronize(cuda::stream(sd.index)));
    HPCNET_CUDA(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, n, s));
    return;
  }
  HPCNET_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
  if (dd.is_cpu()) {
    HPCNET_CUDA(cudaStreamSynchronize(s));
    cuda::raise_deferred_errors(index);
  }
}

#endif  // HPCNET_WITH_CUDA

}  // namespace hpcnet
