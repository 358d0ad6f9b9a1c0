// Tensor construction, metadata, element conversion and strided copies. Storage comes from the
// device's caching allocator; copies and fills involving a CUDA device go through
// src/core/cuda_device.h (contiguous same-dtype copies directly, anything else staged through
// the CPU, which is correct but slow and kept out of training steps).
#include "hpcnet/tensor.h"

#include <cstring>
#include <sstream>

#include "src/core/allocator.h"
#include "src/core/bf16.h"
#include "src/core/cuda_device.h"

namespace hpcnet {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kUInt8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = device.is_cpu() ? cpu_cached_alloc(nbytes) : cuda_cached_alloc(nbytes, device.index);
}

Storage::~Storage() {
  if (device_.is_cpu())
    cpu_cached_free(data_, nbytes_);
  else
    cuda_cached_free(data_, nbytes_, device_.index);
}

// ---- factories ----

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    HPCNET_CHECK(d >= 0, "negative dimension in shape " + shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty_layout(const Shape& shape, DType dtype, Device device, Layout layout) {
  Tensor t = empty(shape, dtype, device);
  if (layout == Layout::kBlocked16) {
    HPCNET_CHECK(shape.size() == 4 && shape[1] % 16 == 0 && device.is_cpu(),
                 "blocked layout needs a CPU (N, C, H, W) tensor with C % 16 == 0, got " +
                     shape_str(shape));
    t.impl_->layout = layout;
  }
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.raw_data(), 0, t.nbytes());
  else
    t.fill_(0.0);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  HPCNET_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "from_vector: " + std::to_string(values.size()) + " values for shape " +
                   shape_str(shape));
  Tensor t = empty(shape, DType::kFloat32);
  if (!values.empty())  // (an empty vector's data() may be null, which memcpy may not take)
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector_f64(const std::vector<double>& values, const Shape& shape) {
  HPCNET_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "from_vector_f64: size does not match shape " + shape_str(shape));
  Tensor t = empty(shape, DType::kFloat64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(double));
  return t;
}

Tensor Tensor::from_labels(const std::vector<int64_t>& values) {
  Tensor t = empty({static_cast<int64_t>(values.size())}, DType::kInt64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

// ---- metadata ----

const Shape& Tensor::shape() const {
  HPCNET_CHECK(defined(), "shape() of an undefined tensor");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  HPCNET_CHECK(defined(), "strides() of an undefined tensor");
  return impl_->strides;
}
int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  HPCNET_CHECK(d >= 0 && d < n, "size(" + std::to_string(d) + ") of a " + std::to_string(n) +
                                    "-d tensor");
  return impl_->shape[d];
}
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const {
  HPCNET_CHECK(defined(), "dtype() of an undefined tensor");
  return impl_->dtype;
}
Device Tensor::device() const {
  HPCNET_CHECK(defined(), "device() of an undefined tensor");
  return impl_->storage->device();
}
bool Tensor::is_contiguous() const {
  return impl_->layout == Layout::kStrided && strides() == contiguous_strides(shape());
}
Layout Tensor::layout() const {
  HPCNET_CHECK(defined(), "layout() of an undefined tensor");
  return impl_->layout;
}
bool Tensor::is_dense() const { return impl_->layout == Layout::kBlocked16 || is_contiguous(); }

namespace {
// Row-major (N, C, H, W) <-> nChw16c, element type T (bitwise copies).
template <class T>
void convert_blocked(const T* src, T* dst, const Shape& s, bool to_blocked) {
  const int64_t n = s[0], cb = s[1] / 16, hw = s[2] * s[3];
#pragma omp parallel for collapse(2) schedule(static) if (n * cb * hw > (1 << 14))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < cb; ++b) {
      const int64_t plain = (i * cb + b) * 16 * hw;  // channel c = 16 b + l at plain + l * hw
      const int64_t blk = (i * cb + b) * hw * 16;    // same block, pixel-major
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t l = 0; l < 16; ++l) {
          if (to_blocked)
            dst[blk + p * 16 + l] = src[plain + l * hw + p];
          else
            dst[plain + l * hw + p] = src[blk + p * 16 + l];
        }
    }
}

void convert_layout(const Tensor& src, Tensor& dst) {
  HPCNET_CHECK(src.device().is_cpu() && dst.device().is_cpu() && src.dtype() == dst.dtype(),
               "layout conversion needs CPU tensors of one dtype");
  const bool to_blocked = dst.layout() == Layout::kBlocked16;
  switch (dtype_size(src.dtype())) {
    case 4:
      convert_blocked(static_cast<const uint32_t*>(src.raw_data()),
                      static_cast<uint32_t*>(dst.raw_data()), src.shape(), to_blocked);
      break;
    case 8:
      convert_blocked(static_cast<const uint64_t*>(src.raw_data()),
                      static_cast<uint64_t*>(dst.raw_data()), src.shape(), to_blocked);
      break;
    default:
      HPCNET_CHECK(false, std::string("blocked layout of ") + dtype_name(src.dtype()));
  }
}
}  // namespace

Tensor Tensor::to_layout(Layout l) const {
  if (layout() == l) return *this;
  Tensor src = l == Layout::kBlocked16 ? contiguous() : *this;  // differs from l here
  Tensor out = empty_layout(shape(), dtype(), device(), l);
  convert_layout(src, out);
  return out;
}

void* Tensor::raw_data() const {
  HPCNET_CHECK(defined(), "raw_data() of an undefined tensor");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(impl_->dtype);
}

// ---- element conversion ----

namespace {

using math::bf16_to_float;
using math::float_to_bf16;
inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}

double load_as_double(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat64: return static_cast<const double*>(base)[i];
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DType::kUInt8: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

void store_from_double(void* base, int64_t i, DType t, double v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_half(static_cast<float>(v));
      break;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::kUInt8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
  }
}

// Calls f(src_index, linear_index) for every element of a strided tensor, in row-major order.
template <class F>
void for_each_strided(const Shape& shape, const Shape& strides, F&& f) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  size_t nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t lin = 0; lin < n; ++lin) {
    f(off, lin);
    for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// The elements a tensor's (shape, strides) reach in its storage, from its offset on.
int64_t storage_extent(const Shape& shape, const Shape& strides) {
  int64_t e = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    e += (shape[d] - 1) * strides[d];
  }
  return e;
}

// A CPU copy of the span of t's storage that t reaches, viewed with t's shape and strides: the
// staging area for strided or converting copies and fills of a tensor on another device.
Tensor host_mirror(const Tensor& t) {
  int64_t ext = storage_extent(t.shape(), t.strides());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(ext * dtype_size(t.dtype()), cpu_device());
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->dtype = t.dtype();
  cuda_copy_bytes(impl->storage->data(), cpu_device(), t.raw_data(), t.device(),
                  ext * dtype_size(t.dtype()));
  return Tensor(std::move(impl));
}

// Writes a host mirror back over the span of t it was made from.
void upload_mirror(const Tensor& mirror, const Tensor& t) {
  int64_t ext = storage_extent(t.shape(), t.strides());
  cuda_copy_bytes(t.raw_data(), t.device(), mirror.raw_data(), cpu_device(),
                  ext * dtype_size(t.dtype()));
}

}  // namespace

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  if (layout() == Layout::kBlocked16)
    convert_layout(*this, out);
  else
    out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->layout = impl_->layout;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = empty(shape(), t, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor out = empty(shape(), dtype(), d);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::to_(Device d) {
  HPCNET_CHECK(defined(), "to_() of an undefined tensor");
  if (d == device()) return *this;
  Tensor moved = to(d);
  impl_->storage = moved.impl_->storage;
  impl_->offset = 0;
  impl_->strides = contiguous_strides(impl_->shape);
  impl_->layout = Layout::kStrided;
  if (impl_->grad.defined()) impl_->grad.to_(d);
  return *this;
}

Tensor Tensor::view_nograd(const Shape& new_shape) const {
  HPCNET_CHECK(is_contiguous(), "view of a non-contiguous tensor; call contiguous() first");
  Shape s = new_shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HPCNET_CHECK(infer < 0, "view: only one dimension may be -1");
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    HPCNET_CHECK(known > 0 && numel() % known == 0,
                 "view: shape " + shape_str(new_shape) + " is invalid for " +
                     std::to_string(numel()) + " elements");
    s[infer] = numel() / known;
  }
  HPCNET_CHECK(shape_numel(s) == numel(), "view: shape " + shape_str(new_shape) +
                                              " is invalid for input of shape " +
                                              shape_str(shape()));
  Tensor out = detach();
  out.impl_->shape = s;
  out.impl_->strides = contiguous_strides(s);
  return out;
}

void Tensor::fill_(double value) {
  if (!device().is_cpu()) {
    if (is_contiguous()) {
      unsigned char pattern[8] = {0};
      store_from_double(pattern, 0, dtype(), value);
      cuda_fill_bytes(raw_data(), device(), pattern, dtype_size(dtype()), numel());
    } else {
      Tensor m = host_mirror(*this);
      m.fill_(value);
      upload_mirror(m, *this);
    }
    return;
  }
  int64_t n = numel();
  void* base = raw_data();
  if (is_contiguous() && dtype() == DType::kFloat32) {
    float v = static_cast<float>(value);
    float* p = static_cast<float*>(base);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  for_each_strided(shape(), strides(),
                   [&](int64_t off, int64_t) { store_from_double(base, off, dtype(), value); });
}

void Tensor::copy_(const Tensor& src) {
  HPCNET_CHECK(src.shape() == shape(), "copy_: shape " + shape_str(src.shape()) + " into " +
                                           shape_str(shape()));
  if (src.layout() == Layout::kBlocked16 || layout() == Layout::kBlocked16) {
    if (src.layout() == layout() && src.dtype() == dtype()) {
      std::memmove(raw_data(), src.raw_data(), nbytes());
      return;
    }
    // Through a row-major tensor of this dtype (conversion, strides and devices as below).
    Tensor plain = src.layout() == Layout::kBlocked16 ? src.to_layout(Layout::kStrided) : src;
    if (layout() != Layout::kBlocked16) return copy_(plain);
    Tensor staged = empty(shape(), dtype(), device());
    staged.copy_(plain);
    convert_layout(staged, *this);
    return;
  }
  if (!device().is_cpu() || !src.device().is_cpu()) {
    bool same_storage = src.impl_->storage == impl_->storage;
    if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous() && !same_storage) {
      cuda_copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
      return;
    }
    // Strided, converting or self-overlapping: stage both sides through the CPU.
    Tensor s = src.device().is_cpu() ? src : host_mirror(src);
    if (device().is_cpu()) {
      copy_(s);
      return;
    }
    Tensor m = host_mirror(*this);
    m.copy_(s);
    upload_mirror(m, *this);
    return;
  }
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  std::vector<int64_t> src_off(numel());
  for_each_strided(src.shape(), src.strides(), [&](int64_t off, int64_t lin) { src_off[lin] = off; });
  const void* sb = src.raw_data();
  void* db = raw_data();
  DType st = src.dtype(), dt = dtype();
  for_each_strided(shape(), strides(), [&](int64_t off, int64_t lin) {
    store_from_double(db, off, dt, load_as_double(sb, src_off[lin], st));
  });
}

double Tensor::item() const {
  HPCNET_CHECK(numel() == 1, "item() of a tensor with " + std::to_string(numel()) + " elements");
  if (!device().is_cpu()) return to(cpu_device()).item();
  return load_as_double(raw_data(), 0, dtype());
}

std::vector<float> Tensor::to_vector() const {
  if (!device().is_cpu()) return to(cpu_device()).to_vector();
  Tensor c = contiguous().to(DType::kFloat32);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

std::vector<double> Tensor::to_vector_f64() const {
  if (!device().is_cpu()) return to(cpu_device()).to_vector_f64();
  Tensor c = contiguous().to(DType::kFloat64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// ---- autograd fields ----

bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool r) {
  HPCNET_CHECK(defined(), "set_requires_grad on an undefined tensor");
  HPCNET_CHECK(!r || dtype() == DType::kFloat32 || dtype() == DType::kFloat64,
               "only floating-point tensors can require gradients");
  impl_->requires_grad = r;
  return *this;
}

const Tensor& Tensor::grad() const {
  HPCNET_CHECK(defined(), "grad() of an undefined tensor");
  return impl_->grad;
}
Tensor& Tensor::mutable_grad() {
  HPCNET_CHECK(defined(), "grad() of an undefined tensor");
  return impl_->grad;
}
void Tensor::set_grad(const Tensor& g) { impl_->grad = g; }
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return defined() ? impl_->grad_fn : none;
}
void Tensor::set_grad_fn(std::shared_ptr<Node> fn) { impl_->grad_fn = std::move(fn); }

}  // namespace hpcnet
