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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/profile.h"
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
// Device `index`'s UUID (cudaDeviceProp::uuid, as nvidia-smi's "GPU-..." without the prefix, 32
// hex digits): the same GPU seen by two processes, whatever CUDA_VISIBLE_DEVICES numbers it.
std::string cuda_device_uuid(int index);
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
// Queues ++*p for an int64 on the device (BatchNorm's num_batches_tracked: no copy, no wait, and
// a CUDA graph replays it).
void cuda_increment_int64(void* p, Device device);

// ---- batches to the GPU ----

// Host-to-device copies of batches through a ring of pinned (page-locked) host buffers, so that
// the training thread never waits for the GPU: upload() copies t's bytes into the next buffer on
// the host, queues an asynchronous copy into a new tensor on `device`'s stream behind an event,
// and returns. A copy from pageable memory would make the driver wait for the stream first. A
// buffer is reused once its previous copy has completed (waiting for it then: `slots` uploads
// in flight at most, which bounds how far the host runs ahead of the GPU). Without CUDA,
// upload() throws like the other memory calls.
class PinnedUploader {
 public:
  explicit PinnedUploader(int slots = 4);
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;
  // A CPU tensor (any strides) -> the same values, row-major, on device (a CUDA device).
  Tensor upload(const Tensor& t, Device device);
  // The same into dst, a contiguous CUDA tensor of t's shape and dtype (a CUDA graph's input).
  void upload_into(const Tensor& t, Tensor& dst);

 private:
  struct Slot {
    void* host = nullptr;   // cudaMallocHost
    size_t bytes = 0;
    void* event = nullptr;  // cudaEvent_t of the last copy out of it
    int device = -1;        // the event's device
  };
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

// ---- CUDA graphs ----

// One captured sequence of device work, replayed with one launch (--cuda-graph): capture(fn)
// runs fn once with the device's stream capturing, so that its kernels are recorded, not run;
// replay() queues them all. Memory allocated while capturing comes from a pool of the graph's own
// (the caching allocator's graph pool), so that no other tensor is ever handed a block the
// graph writes; the tensors fn left alive (outputs, gradients) keep pointing at the blocks each
// replay rewrites. What fn did on the host (argument checks, shapes, learning rates passed as
// kernel arguments) is not redone by a replay: fixed shapes and fixed scalars only. A capture
// fails, and returns false with why() saying so, when fn waits for the device (a copy to the
// CPU, item()) or otherwise does what a graph cannot hold; the stream is then usable again and
// nothing of fn's work ran on the device (what fn changed on the host stays: tensors it made
// hold what the unrun kernels would have written, and the caller undoes that). Without CUDA, capture() throws like the other memory calls.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  bool capture(Device device, const std::function<void()>& fn);
  void replay();
  // Destroys the graph and gives its memory pool back (after the device finished with it).
  void clear() { reset(); }
  bool captured() const { return exec_ != nullptr; }
  const std::string& why() const { return why_; }

 private:
  void reset();
  Device device_ = cpu_device();
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int pool_ = -1;          // the allocator's graph pool
  std::string why_;
};

// The caching allocator's graph pools (src/core/cuda_allocator.cpp), for CudaGraph: between
// begin and end, device `index`'s allocations come from pool `id`, and the blocks it hands out
// stay the pool's (a freed one returns to the pool, never to the shared lists) until release,
// which gives the pool's free blocks back and lets those still in use return normally later.
int cuda_graph_pool_begin(int index);
void cuda_graph_pool_end(int index);
void cuda_graph_pool_release(int index, int id);

// ---- per-kernel timing ----

// The profiler's device timer for `device` (profile::DeviceTimer): each call is bracketed by two
// CUDA events recorded on the device's stream (events are reused between flushes), and flush()
// waits for the stream, then adds cudaEventElapsedTime of each pair. The profile then holds the
// kernels' time on the GPU, not their launch time. Without CUDA, throws like the memory calls.
std::unique_ptr<profile::DeviceTimer> make_cuda_event_timer(Device device);

// Queues a fill of n elements of elem_size (1, 2, 4 or 8) bytes with the bytes at pattern.
void cuda_fill_bytes(void* dst, Device device, const void* pattern, size_t elem_size, int64_t n);

}  // namespace hpcnet
