// Fuzzes the index of a decoded-image cache file (--cache disk, .hpcache: parse_cache_index, as
// DiskCachedDataset reads a memory-mapped file). Nothing is thrown: a bad file is a message. Every
// image and mask the index accepts must lie inside the file, before the index (their bytes are read
// here, so ASan sees any overrun).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/data/cache_file.h"

namespace detail = hpcnet::data::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<detail::CacheEntry> entries;
  const std::string error = detail::parse_cache_index(data, size, -1, &entries);
  if (!error.empty()) return 0;
  unsigned sum = 0;
  for (const detail::CacheEntry& e : entries) {
    if (e.height <= 0 || e.width <= 0) std::abort();
    const uint64_t px = static_cast<uint64_t>(e.height) * static_cast<uint64_t>(e.width);
    if (e.offset > size || px * 3 > size - e.offset) std::abort();
    for (uint64_t i = 0; i < px * 3; ++i) sum += data[e.offset + i];
    if (e.mask_offset != 0) {
      if (e.mask_offset > size || px > size - e.mask_offset) std::abort();
      for (uint64_t i = 0; i < px; ++i) sum += data[e.mask_offset + i];
    }
  }
  return static_cast<int>(sum & 0);
}
