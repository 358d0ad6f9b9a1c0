// CUDA caching allocator: per device, size-bucketed free lists of cudaMalloc'd blocks, so a
// training loop whose shapes repeat calls cudaMalloc only in its first step (and cudaFree, which
// synchronises the device, never in steady state). Requests round up to 512 bytes below 1 MiB
// and to a quarter of the next power of two above, so nearby sizes share blocks. A block freed
// here may be handed out again at once: all of hpcnet's work on a device runs on one stream, so
// the next user's kernels queue after the last user's. Thread-safe. Without HPCNET_WITH_CUDA the
// functions throw (see src/core/cuda_device.cpp).
#ifdef HPCNET_WITH_CUDA

#include <array>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "src/core/cuda_device.h"
#include "src/core/cuda_util.h"

namespace hpcnet {
namespace {

struct DeviceCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;
};

std::array<DeviceCache, cuda::kMaxDevices>& caches() {
  // Never destroyed: storages may outlive static destructors, and cudaFree at exit can fail.
  static auto* c = new std::array<DeviceCache, cuda::kMaxDevices>();
  return *c;
}

DeviceCache& cache(int index) {
  if (index < 0 || index >= cuda::kMaxDevices)
    throw Error("CUDA device index " + std::to_string(index) + " is out of range");
  return caches()[index];
}

size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= (size_t{1} << 20)) return (n + 511) & ~size_t{511};
  size_t p = size_t{1} << 20;
  while (p < n) p <<= 1;
  size_t quarter = p / 4;
  return (n + quarter - 1) / quarter * quarter;
}

// Frees every cached block of one device; the caller holds its lock.
void release_locked(DeviceCache& c, int index) {
  bool any = false;
  for (auto& [size, list] : c.free_lists) any = any || !list.empty();
  if (!any) return;
  cuda::set_device(index);
  for (auto& [size, list] : c.free_lists) {
    for (void* p : list) HPCNET_CUDA(cudaFree(p));  // cudaFree waits for the device
    list.clear();
  }
  c.stats.bytes_cached = 0;
}

}  // namespace

void* cuda_cached_alloc(size_t nbytes, int index) {
  size_t size = round_size(nbytes);
  DeviceCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.free_lists.find(size);
  if (it != c.free_lists.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    c.stats.cache_hits++;
    c.stats.bytes_cached -= size;
    c.stats.bytes_in_use += size;
    return p;
  }
  cuda::set_device(index);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it, give the cache back, try once more
    release_locked(c, index);
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cuda::throw_cuda_error(
        e,
        ("cudaMalloc of " + std::to_string(size) + " bytes on cuda:" + std::to_string(index))
            .c_str(),
        __FILE__, __LINE__);
  }
  c.stats.system_allocs++;
  c.stats.bytes_in_use += size;
  return p;
}

void cuda_cached_free(void* ptr, size_t nbytes, int index) {
  if (!ptr || index < 0 || index >= cuda::kMaxDevices) return;
  size_t size = round_size(nbytes);
  DeviceCache& c = caches()[index];
  std::lock_guard<std::mutex> lock(c.mu);
  c.free_lists[size].push_back(ptr);
  c.stats.bytes_cached += size;
  c.stats.bytes_in_use -= size;
}

AllocatorStats cuda_allocator_stats(int index) {
  DeviceCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void cuda_allocator_release_cached() {
  for (int i = 0; i < cuda::kMaxDevices; ++i) {
    DeviceCache& c = caches()[i];
    std::lock_guard<std::mutex> lock(c.mu);
    release_locked(c, i);
  }
}

}  // namespace hpcnet

#endif  // HPCNET_WITH_CUDA
