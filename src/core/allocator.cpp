// CPU caching allocator over src/core/block_cache.h's free lists: requests round up to 64 bytes
// below 4 KiB and to a quarter of the next power of two above; blocks are 64-byte aligned.
#include "src/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>

#include "src/core/block_cache.h"

namespace hpcnet {
namespace {

BlockCache& cache() {
  // Never destroyed: storages may outlive static destructors.
  static BlockCache* c = new BlockCache();
  return *c;
}

size_t round_size(size_t n) { return round_block_size(n, 64, 4096); }

}  // namespace

void* cpu_cached_alloc(size_t nbytes) {
  size_t size = round_size(nbytes);
  BlockCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (void* p = c.take_locked(size)) return p;
    c.count_system_alloc_locked(size);
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) throw std::bad_alloc();
  return p;
}

void cpu_cached_free(void* ptr, size_t nbytes) {
  if (ptr) cache().give_back(ptr, round_size(nbytes));
}

AllocatorStats cpu_allocator_stats() { return cache().snapshot(); }

void cpu_allocator_release_cached() {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.release_locked([](void* p) { std::free(p); });
}

}  // namespace hpcnet
