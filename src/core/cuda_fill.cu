// cuda_fill_bytes: fills n elements of 1, 2, 4 or 8 bytes on a device with one pattern (the
// kernel behind Tensor::fill_ on CUDA; the host converts the value to the dtype's bytes), and
// cuda_increment_int64 (a counter kept on the device, bumped without a wait).
#include <cstring>

#include "src/core/cuda_device.h"
#include "src/core/cuda_util.h"

namespace hpcnet {
namespace {

template <class U>
__global__ void fill_kernel(U* __restrict__ p, U v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = v;
}

template <class U>
void launch_fill(void* dst, const void* pattern, int64_t n, cudaStream_t s) {
  U v;
  std::memcpy(&v, pattern, sizeof(U));
  int64_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  fill_kernel<U><<<static_cast<unsigned>(blocks), 256, 0, s>>>(static_cast<U*>(dst), v, n);
  HPCNET_CUDA_LAUNCH(fill_kernel);
}

__global__ void increment_kernel(int64_t* p) { ++*p; }

}  // namespace

void cuda_increment_int64(void* p, Device device) {
  HPCNET_CHECK(device.is_cuda(), "cuda_increment_int64 on " + device.str());
  cuda::set_device(device.index);
  increment_kernel<<<1, 1, 0, cuda::stream(device.index)>>>(static_cast<int64_t*>(p));
  HPCNET_CUDA_LAUNCH(increment_kernel);
}

void cuda_fill_bytes(void* dst, Device device, const void* pattern, size_t elem_size, int64_t n) {
  HPCNET_CHECK(device.is_cuda(), "cuda_fill_bytes on " + device.str());
  if (n <= 0) return;
  cuda::set_device(device.index);
  cudaStream_t s = cuda::stream(device.index);
  switch (elem_size) {
    case 1:
      launch_fill<uint8_t>(dst, pattern, n, s);
      break;
    case 2:
      launch_fill<uint16_t>(dst, pattern, n, s);
      break;
    case 4:
      launch_fill<uint32_t>(dst, pattern, n, s);
      break;
    case 8:
      launch_fill<uint64_t>(dst, pattern, n, s);
      break;
    default:
      throw Error("cuda_fill_bytes: element size " + std::to_string(elem_size));
  }
}

}  // namespace hpcnet
