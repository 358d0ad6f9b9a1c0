// Argument checks shared by the dispatching kernel API, and the threads setting.
#include <atomic>
#include "src/ops/dispatch.h"

#include <omp.h>

namespace hpcnet::ops {
namespace detail {

void no_backend(const char* op, Device d) {
  throw Error(std::string(op) + ": no kernel for device " + d.str() +
              " in this build (rebuild with -DHPCNET_CUDA=ON for CUDA)");
}

void check_same_device(const char* op, Device d, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    if (!(t->device() == d))
      throw Error(std::string(op) + ": tensors on different devices (" + t->device().str() +
                  " and " + d.str() + ")");
    if (!t->is_contiguous())
      throw Error(std::string(op) + ": kernels take contiguous tensors; got strides " +
                  shape_str(t->strides()));
  }
}

void check_same_device_dense(const char* op, Device d, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    if (!(t->device() == d))
      throw Error(std::string(op) + ": tensors on different devices (" + t->device().str() +
                  " and " + d.str() + ")");
    if (!t->is_dense())
      throw Error(std::string(op) + ": kernels take dense tensors; got strides " +
                  shape_str(t->strides()));
    if (first && t->dim() == first->dim() && t->layout() != first->layout())
      throw Error(std::string(op) + ": tensors of one shape in different layouts");
    if (!first) first = t;
  }
}

}  // namespace detail

Tensor as_layout(const Tensor& t, const Tensor& like) {
  if (!t.defined()) return t;
  if (t.layout() == like.layout() && t.is_dense()) return t;
  return t.contiguous().to_layout(like.layout());
}

namespace detail {

void check_dtype(const char* op, const Tensor& t, DType want, const char* arg) {
  if (t.dtype() != want)
    throw Error(std::string(op) + ": " + arg + " has dtype " + dtype_name(t.dtype()) +
                ", expected " + dtype_name(want));
}

void check_shape(const char* op, const Tensor& t, const Shape& want, const char* arg) {
  if (t.shape() != want)
    throw Error(std::string(op) + ": " + arg + " has shape " + shape_str(t.shape()) +
                ", expected " + shape_str(want));
}

}  // namespace detail

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

namespace {
std::atomic<Precision> g_conv_precision{Precision::kFloat32};
}
void set_conv_precision(Precision p) { g_conv_precision.store(p); }
bool cpu_supports_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}
Precision conv_precision() { return g_conv_precision.load(); }

void set_cuda_tf32([[maybe_unused]] bool on) {
#ifdef HPCNET_WITH_CUDA
  cuda::set_allow_tf32(on);
#endif
}
void set_cuda_deterministic([[maybe_unused]] bool on) {
#ifdef HPCNET_WITH_CUDA
  cuda::set_deterministic(on);
#endif
}

namespace {
std::atomic<bool> g_int8_inference{false};
}  // namespace
void set_int8_inference(bool on) { g_int8_inference.store(on); }
bool int8_inference() { return g_int8_inference.load(std::memory_order_relaxed); }

namespace {
std::atomic<ConvAlgorithm> g_conv_algorithm{ConvAlgorithm::kAuto};
}
void set_conv_algorithm(ConvAlgorithm a) { g_conv_algorithm.store(a); }
ConvAlgorithm conv_algorithm() { return g_conv_algorithm.load(); }

}  // namespace hpcnet::ops
