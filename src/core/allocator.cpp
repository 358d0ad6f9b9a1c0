// Size-bucketed free lists: requests are rounded up (to 64 bytes below 4 KiB, to a quarter of the
// next power of two above) so slightly different sizes share blocks.
#include "src/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "hpcnet/tensor.h"

namespace hpcnet {
namespace {

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: storages may outlive static destructors
  return *c;
}

size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + 63) & ~size_t{63};
  size_t p = 4096;
  while (p < n) p <<= 1;
  size_t quarter = p / 4;
  return (n + quarter - 1) / quarter * quarter;
}

}  // namespace

void* cpu_cached_alloc(size_t nbytes) {
  size_t size = round_size(nbytes);
  Cache& c = cache();
  {
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
    c.stats.system_allocs++;
    c.stats.bytes_in_use += size;
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) throw std::bad_alloc();
  return p;
}

void cpu_cached_free(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.free_lists[size].push_back(ptr);
  c.stats.bytes_cached += size;
  c.stats.bytes_in_use -= size;
}

AllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void cpu_allocator_release_cached() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, list] : c.free_lists) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  c.stats.bytes_cached = 0;
}

}  // namespace hpcnet
