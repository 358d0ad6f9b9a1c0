// The size-bucketed free lists behind the CPU and the CUDA caching allocators. Requests round up
// to a multiple of `fine` bytes up to `coarse_from` and to a quarter of the next power of two
// above, so nearby sizes share blocks; a freed block goes to the list of its rounded size and is
// handed out again for the next request of that size.
#pragma once

#include <cstddef>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hpcnet/tensor.h"

namespace hpcnet {

inline size_t round_block_size(size_t n, size_t fine, size_t coarse_from) {
  if (n == 0) n = 1;
  if (n <= coarse_from) return (n + fine - 1) / fine * fine;
  size_t p = coarse_from;
  while (p < n) p <<= 1;
  size_t quarter = p / 4;
  return (n + quarter - 1) / quarter * quarter;
}

// One cache's lists and statistics. The *_locked calls expect the caller to hold `mu`.
struct BlockCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;

  // A cached block of `size` (rounded) bytes, now counted in use; null when there is none.
  void* take_locked(size_t size) {
    auto it = free_lists.find(size);
    if (it == free_lists.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    stats.cache_hits++;
    stats.bytes_cached -= size;
    add_in_use_locked(size);
    return p;
  }
  // Counts a block just allocated from the system.
  void count_system_alloc_locked(size_t size) {
    stats.system_allocs++;
    add_in_use_locked(size);
  }
  void add_in_use_locked(size_t size) {
    stats.bytes_in_use += size;
    if (stats.bytes_in_use > stats.peak_bytes_in_use) stats.peak_bytes_in_use = stats.bytes_in_use;
  }
  // Keeps a freed block of `size` (rounded) bytes for reuse.
  void give_back(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu);
    free_lists[size].push_back(p);
    stats.bytes_cached += size;
    stats.bytes_in_use -= size;
  }
  // Passes every cached block to free_block and empties the lists.
  // A block leaves its list before it is freed, so a free_block that throws leaves no freed block
  // behind in the lists.
  template <class Free>
  void release_locked(Free&& free_block) {
    for (auto& [size, list] : free_lists)
      while (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        stats.bytes_cached -= size;
        free_block(p);
      }
  }
  AllocatorStats snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    return stats;
  }
};

// The books of the CUDA allocator's graph pools (CudaGraph; src/core/cuda_allocator.cpp), kept
// apart from cudaMalloc so that the host tests can check them: while a capture is open its
// allocations are the pool's, a pool's block freed goes back to the pool (a replay rewrites it)
// and never to the shared lists, and a released pool gives back its free blocks and lets those
// still in use return to the shared lists when they are freed. The caller holds the cache's lock.
struct GraphPoolBook {
  std::unordered_map<int, std::unordered_map<size_t, std::vector<void*>>> free;  // by pool
  std::unordered_map<void*, int> owner;  // every block a pool holds, free or in use
  int capturing = -1, next_id = 0;

  int begin() {
    capturing = next_id++;
    free[capturing];
    return capturing;
  }
  void end() { capturing = -1; }
  // During a capture: a free block of the pool of this size, or null.
  void* take(size_t size) {
    if (capturing < 0) return nullptr;
    std::vector<void*>& list = free[capturing][size];
    if (list.empty()) return nullptr;
    void* p = list.back();
    list.pop_back();
    return p;
  }
  // A block handed out (from the shared lists or the system): the capturing pool's from now on.
  void handed_out(void* p) {
    if (capturing >= 0) owner[p] = capturing;
  }
  // A freed block: true when a pool took it back (not for the shared lists).
  bool give_back(void* p, size_t size) {
    auto it = owner.find(p);
    if (it == owner.end()) return false;
    free[it->second][size].push_back(p);
    return true;
  }
  // Ends pool id: its free blocks (for the shared lists), and its blocks in use leave the books.
  std::vector<std::pair<void*, size_t>> release(int id) {
    std::vector<std::pair<void*, size_t>> back;
    auto it = free.find(id);
    if (it == free.end()) return back;
    for (auto& [size, list] : it->second)
      for (void* p : list) back.emplace_back(p, size);
    free.erase(it);
    for (auto o = owner.begin(); o != owner.end();) o = o->second == id ? owner.erase(o) : std::next(o);
    if (capturing == id) capturing = -1;
    return back;
  }
};

}  // namespace hpcnet
