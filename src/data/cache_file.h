// The index of a decoded-image cache file (--cache disk; the format is in cache.cpp's header),
// parsed apart from the mapping so the fuzz target can reach it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpcnet::data::detail {

inline constexpr char kCacheMagic[9] = "HPCNETC1";

struct CacheEntry {
  uint64_t offset = 0;  // the pixels, (height, width, 3)
  int64_t height = 0, width = 0;
  uint64_t mask_offset = 0;  // the mask, (height, width); 0: none
};

// Checks the file's header and index (size bytes at data) and fills *entries: every image and
// mask lies inside the file, before the index. n >= 0: the item count it must hold. Returns "" or
// what is wrong ("index outside the file (truncated?)").
std::string parse_cache_index(const uint8_t* data, size_t size, int64_t n,
                              std::vector<CacheEntry>* entries);

}  // namespace hpcnet::data::detail
