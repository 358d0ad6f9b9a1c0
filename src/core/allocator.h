// CPU caching allocator: 64-byte aligned blocks kept in per-size free lists, so a training loop
// whose shapes repeat allocates from the system only in its first step. Thread-safe.
#pragma once

#include <cstddef>

namespace hpcnet {

void* cpu_cached_alloc(size_t nbytes);
void cpu_cached_free(void* ptr, size_t nbytes);

}  // namespace hpcnet
