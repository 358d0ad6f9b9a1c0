// CUDA caching allocator: per device, size-bucketed free lists of cudaMalloc'd blocks, so a
// training loop whose shapes repeat calls cudaMalloc only in its first step (and cudaFree, which
// synchronises the device, never in steady state). Requests round up to 512 bytes below 1 MiB
// and to a quarter of the next power of two above, so nearby sizes share blocks. A block freed
// here may be handed out again at once: all of hpcnet's work on a device runs on one stream, so
// the next user's kernels queue after the last user's. Thread-safe. Without HPCNET_WITH_CUDA the
// functions throw (see src/core/cuda_device.cpp).
// Graph pools (CudaGraph): while a capture is open on a device, its allocations are the pool's;
// a pool's block, freed, goes back to the pool (a replay rewrites it), never to the shared lists,
// until the pool is released.
#ifdef HPCNET_WITH_CUDA

#include <array>
#include <mutex>

#include "src/core/block_cache.h"
#include "src/core/cuda_device.h"
#include "src/core/cuda_util.h"

namespace hpcnet {
namespace {

std::array<BlockCache, cuda::kMaxDevices>& caches() {
  // Never destroyed: storages may outlive static destructors, and cudaFree at exit can fail.
  static auto* c = new std::array<BlockCache, cuda::kMaxDevices>();
  return *c;
}

BlockCache& cache(int index) {
  if (index < 0 || index >= cuda::kMaxDevices)
    throw Error("CUDA device index " + std::to_string(index) + " is out of range");
  return caches()[index];
}

size_t round_size(size_t n) { return round_block_size(n, 512, size_t{1} << 20); }

// Per device, under its BlockCache's lock.
std::array<GraphPoolBook, cuda::kMaxDevices>& graph_pools() {
  static auto* g = new std::array<GraphPoolBook, cuda::kMaxDevices>();
  return *g;
}

// Frees every cached block of one device (cudaFree waits for the device); the caller holds its
// lock.
void release_locked(BlockCache& c, int index) {
  bool device_set = false;
  c.release_locked([&](void* p) {
    if (!device_set) cuda::set_device(index);
    device_set = true;
    HPCNET_CUDA(cudaFree(p));
  });
}

// A new block from cudaMalloc (after returning the cache to the driver and retrying once when the
// device is full); the caller holds c's lock.
void* system_alloc_locked(BlockCache& c, size_t size, int index) {
  cuda::set_device(index);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  // Giving the cache back frees memory (cudaFree), which a stream capture does not allow: while
  // capturing, out of memory is an error at once.
  if (e == cudaErrorMemoryAllocation && graph_pools()[index].capturing < 0) {
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
  c.count_system_alloc_locked(size);
  return p;
}

}  // namespace

void* cuda_cached_alloc(size_t nbytes, int index) {
  size_t size = round_size(nbytes);
  BlockCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  GraphPoolBook& gp = graph_pools()[index];
  if (void* p = gp.take(size)) {  // a capture: the pool's own free block first
    c.add_in_use_locked(size);
    return p;
  }
  void* p = c.take_locked(size);
  if (!p) p = system_alloc_locked(c, size, index);
  gp.handed_out(p);
  return p;
}

void cuda_cached_free(void* ptr, size_t nbytes, int index) {
  if (!ptr || index < 0 || index >= cuda::kMaxDevices) return;
  BlockCache& c = caches()[index];
  const size_t size = round_size(nbytes);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (graph_pools()[index].give_back(ptr, size)) {
      c.stats.bytes_in_use -= size;
      return;
    }
  }
  c.give_back(ptr, size);
}

int cuda_graph_pool_begin(int index) {
  BlockCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  GraphPoolBook& gp = graph_pools()[index];
  HPCNET_CHECK(gp.capturing < 0, "CUDA graphs: one capture at a time per device");
  return gp.begin();
}

void cuda_graph_pool_end(int index) {
  BlockCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  graph_pools()[index].end();
}

void cuda_graph_pool_release(int index, int id) {
  BlockCache& c = cache(index);
  std::lock_guard<std::mutex> lock(c.mu);
  // The pool's free blocks join the shared lists (counted out of use when the pool took them).
  for (auto& [p, size] : graph_pools()[index].release(id)) {
    c.free_lists[size].push_back(p);
    c.stats.bytes_cached += size;
  }
}

AllocatorStats cuda_allocator_stats(int index) { return cache(index).snapshot(); }

void cuda_allocator_release_cached() {
  for (int i = 0; i < cuda::kMaxDevices; ++i) {
    BlockCache& c = caches()[i];
    std::lock_guard<std::mutex> lock(c.mu);
    release_locked(c, i);
  }
}

}  // namespace hpcnet

#endif  // HPCNET_WITH_CUDA
