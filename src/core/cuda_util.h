// CUDA plumbing shared by src/core and src/ops/*/cuda.cu (CUDA build only): the one family of
// checking macros for the CUDA runtime, cuDNN and cuBLAS(Lt) calls, each turning a failure into
// an hpcnet::Error that names the call and file:line; the stream of each device; and the slot
// where kernels report bad input (an out-of-range label) without a host synchronisation.
#pragma once

#ifndef HPCNET_WITH_CUDA
#error "src/core/cuda_util.h belongs to the CUDA build (HPCNET_WITH_CUDA)"
#endif

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>

#include "hpcnet/error.h"

namespace hpcnet::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file,
                                     int line);

}  // namespace hpcnet::cuda

// HPCNET_CUDA(cudaMalloc(&p, n)); HPCNET_CUDNN(cudnnCreate(&h));
// HPCNET_CUBLAS(cublasLtMatmul(...));
#define HPCNET_CUDA(...)                                                             \
  do {                                                                               \
    cudaError_t hpcnet_e_ = (__VA_ARGS__);                                           \
    if (hpcnet_e_ != cudaSuccess)                                                    \
      ::hpcnet::cuda::throw_cuda_error(hpcnet_e_, #__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)
#define HPCNET_CUDNN(...)                                                             \
  do {                                                                                \
    cudnnStatus_t hpcnet_s_ = (__VA_ARGS__);                                          \
    if (hpcnet_s_ != CUDNN_STATUS_SUCCESS)                                            \
      ::hpcnet::cuda::throw_cudnn_error(hpcnet_s_, #__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)
#define HPCNET_CUBLAS(...)                                                             \
  do {                                                                                 \
    cublasStatus_t hpcnet_s_ = (__VA_ARGS__);                                          \
    if (hpcnet_s_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::hpcnet::cuda::throw_cublas_error(hpcnet_s_, #__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: HPCNET_CUDA_LAUNCH(relu_kernel) reports a bad launch configuration (or an
// earlier asynchronous fault) naming the kernel.
#define HPCNET_CUDA_LAUNCH(kernel_name)                                                           \
  do {                                                                                            \
    cudaError_t hpcnet_e_ = cudaGetLastError();                                                   \
    if (hpcnet_e_ != cudaSuccess)                                                                 \
      ::hpcnet::cuda::throw_cuda_error(hpcnet_e_, "launch of " #kernel_name, __FILE__, __LINE__); \
  } while (0)

namespace hpcnet::cuda {

// Most devices hpcnet addresses (indices 0..kMaxDevices-1).
constexpr int kMaxDevices = 16;

// Makes `index` the calling thread's current device (one cudaGetDevice when it already is).
void set_device(int index);
// The stream all of hpcnet's work on device `index` goes to (created on first use; a blocking
// stream, so the legacy default stream still orders against it).
cudaStream_t stream(int index);

// Where kernels record bad input found on the device: the first report wins; the host reads it
// at the next synchronisation (mapped pinned memory, so no copy is queued).
struct DeviceErrorSlot {
  int flag;  // 0: nothing reported; 1: an out-of-range label
  int pad;
  int64_t row;    // the sample
  int64_t value;  // the label
  int64_t limit;  // the number of classes
};
// The device-side address of device `index`'s slot.
DeviceErrorSlot* error_slot(int index);
// Throws InputError for a recorded report (and clears it). Call only after the device's stream
// has been synchronised.
void raise_deferred_errors(int index);

}  // namespace hpcnet::cuda
