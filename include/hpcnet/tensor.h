// Tensor: a typed, strided view of reference-counted storage on a device, plus the autograd
// fields (requires_grad, grad, grad_fn). Copies of a Tensor share one TensorImpl, as in PyTorch.
// Invariants: storage holds at least offset + the extent of (shape, strides) elements; a
// contiguous tensor has row-major strides; dtype never changes after creation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/error.h"

namespace hpcnet {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kBFloat16,
  kFloat16,
  kInt64,
  kInt32,
  kUInt8,
};
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", matching torch's names

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const;
};
inline Device cpu_device() { return Device{}; }
inline Device cuda_device(int index = 0) { return Device{DeviceType::kCUDA, index}; }

using Shape = std::vector<int64_t>;

// How a tensor's elements lie in memory. kStrided: shape and strides (row-major when contiguous).
// kBlocked16: a 4-D (N, C, H, W) float tensor with C % 16 == 0 stored as oneDNN's nChw16c
// (channel blocks of 16 innermost: offset ((n * C/16 + c/16) * H * W + h * W + w) * 16 + c % 16),
// the layout oneDNN's convolutions run on. CPU kernels that know it keep activations blocked
// between layers (convolution, batch norm, relu, add); a blocked tensor is never "contiguous",
// so every other op converts it first (contiguous(), clone(), to_vector() give row-major).
enum class Layout { kStrided, kBlocked16 };
std::string shape_str(const Shape& s);  // "(4, 3, 32, 32)"
int64_t shape_numel(const Shape& s);

// Bytes on one device, returned to its caching allocator when the last owner goes.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

struct Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Contents of empty() are unspecified.
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32, Device device = {});
  // An uninitialised tensor in `layout` (kBlocked16 needs 4 dims with C % 16 == 0, on the CPU).
  static Tensor empty_layout(const Shape& shape, DType dtype, Device device, Layout layout);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = {});
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32,
                     Device device = {});
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector_f64(const std::vector<double>& values, const Shape& shape);
  static Tensor from_labels(const std::vector<int64_t>& values);  // (N,) int64

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  Layout layout() const;
  // Row-major contiguous or blocked: the storage holds exactly numel() elements in a layout that
  // layout-aware kernels read directly.
  bool is_dense() const;
  // This tensor when it already has `layout`, else a converted copy (CPU, dense inputs).
  Tensor to_layout(Layout layout) const;

  // Typed pointer to the first element (offset applied). Checks the dtype. For a CUDA tensor this
  // is a device pointer.
  template <class T>
  T* data() const;
  void* raw_data() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // New tensors (no autograd history).
  Tensor clone() const;       // contiguous copy
  Tensor contiguous() const;  // this if contiguous, else a copy
  Tensor detach() const;      // shares storage, no history
  Tensor to(DType dtype) const;
  // A contiguous copy on `device` (this tensor itself when it is already there). Copies to the CPU
  // wait for the device; no autograd history.
  Tensor to(Device device) const;
  // Moves this tensor's data to `device` in place (as PyTorch's `param.data = param.data.to(d)`):
  // every handle sharing this tensor (module fields, optimizer lists) sees the move; its grad
  // moves too. Views made earlier with detach()/view_nograd() keep the old storage.
  Tensor& to_(Device device);
  // Shares storage with a new shape (one dim may be -1). Requires contiguity. No autograd:
  // use F::reshape for a differentiable view.
  Tensor view_nograd(const Shape& shape) const;

  void fill_(double value);
  void copy_(const Tensor& src);  // same shape; converts dtype; any devices
  double item() const;            // one-element tensor to double (waits for a CUDA device)
  std::vector<float> to_vector() const;
  std::vector<double> to_vector_f64() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r);
  const Tensor& grad() const;
  Tensor& mutable_grad();
  void set_grad(const Tensor& g);
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> fn);
  bool is_leaf() const { return grad_fn() == nullptr; }
  // Back-propagates from this tensor. With no argument it must hold one element (grad 1).
  void backward(const Tensor& grad = Tensor()) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // for kBlocked16: the row-major strides of shape (unused by the layout)
  Layout layout = Layout::kStrided;
  DType dtype = DType::kFloat32;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
};

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};

template <class T>
T* Tensor::data() const {
  HPCNET_CHECK(defined(), "data() of an undefined tensor");
  HPCNET_CHECK(impl_->dtype == DTypeOf<T>::value,
               std::string("data<T>() with the wrong type; tensor is ") + dtype_name(impl_->dtype));
  return static_cast<T*>(impl_->storage->data()) + impl_->offset;
}

// Contiguous row-major strides for a shape.
Shape contiguous_strides(const Shape& shape);

// Counters of a caching allocator (CPU here; CUDA: cuda_allocator_stats in src/core/cuda_device.h),
// for tests and `hpcnet bench`.
struct AllocatorStats {
  uint64_t system_allocs = 0;  // calls into the system allocator (cache misses)
  uint64_t cache_hits = 0;
  uint64_t bytes_cached = 0;   // held in free lists
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;  // the most bytes_in_use has been
};
AllocatorStats cpu_allocator_stats();
void cpu_allocator_release_cached();  // returns all cached blocks to the system

}  // namespace hpcnet
