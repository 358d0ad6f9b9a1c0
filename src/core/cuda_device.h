// The CUDA runtime as the rest of hpcnet sees it, with no CUDA header needed: whether a GPU can
// be used, what it is, device memory (the caching allocator) and copies between devices.
// Every function exists in every build: without HPCNET_WITH_CUDA, cuda_available() is false and
// the memory functions throw an Error saying the build has no CUDA backend.
// Invariants: all work goes to one stream per device (cuda_stream in src/core/cuda_util.h), so
// memory returned to the cache is safe to hand out again in stream order; copies to the CPU
// wait for the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hpcnet/tensor.h"

namespace hpcnet {

// Whether this build has the CUDA backend (HPCNET_WITH_CUDA).
bool cuda_built();
// Whether a CUDA device can be used: the build has CUDA, the driver loads and at least one device
// is visible. Never throws or crashes (no driver, no GPU, or a driver older than the runtime all
// give false); the answer is computed once per process.
bool cuda_available();
// Visible devices (0 when unavailable).
int cuda_device_count();
// Why cuda_available() is false, in one line ("this build has no CUDA backend ...",
// "cudaGetDeviceCount: no CUDA-capable device is detected (cudaErrorNoDevice)"); "" when true.
std::string cuda_unavailable_reason();
// One line per device and the library versions, for `hpcnet info`:
//   "cuda:0 NVIDIA H200, sm_90, 132 SMs, 139.8 GiB; driver 13.0, runtime 13.0, cuDNN 9.19.0,
//    cuBLASLt 130100"; or the unavailable reason.
std::string cuda_describe();
// Waits for all work queued on the device's stream, then raises any deferred input error found
// on the device (see src/core/cuda_util.h).
void cuda_synchronize(Device device);

// ---- device memory ----

// Device memory from the caching allocator of device `index` (256-byte aligned). A failed
// cudaMalloc first returns every cached block to the driver and tries again, then throws.
void* cuda_cached_alloc(size_t nbytes, int index);
// Returns a block to the cache (no CUDA call; never throws).
void cuda_cached_free(void* ptr, size_t nbytes, int index);
// Counters of device `index`'s caching allocator (AllocatorStats as for the CPU).
AllocatorStats cuda_allocator_stats(int index = 0);
// Returns every cached block of every device to the driver (after waiting for the devices).
void cuda_allocator_release_cached();

// ---- copies and fills (contiguous bytes) ----

// Copies n bytes between any two devices (CPU or CUDA). A copy to the CPU waits for the
// source device's stream and then raises deferred device-side input errors; a copy from pageable
// CPU memory returns once the source may be reused; device-to-device copies are queued.
void cuda_copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);
// Queues a fill of n elements of elem_size (1, 2, 4 or 8) bytes with the bytes at pattern.
void cuda_fill_bytes(void* dst, Device device, const void* pattern, size_t elem_size, int64_t n);

}  // namespace hpcnet
