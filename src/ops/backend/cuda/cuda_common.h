// Plumbing for the CUDA kernels in this folder (CUDA build only): the tensor's device made
// current, its stream, per-thread cuDNN and cuBLASLt handles, launch sizes, float dispatch and
// scratch memory from the caching allocator.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "src/core/cuda_device.h"
#include "src/core/cuda_util.h"
#include "src/ops/backend/cuda/cuda_ops.h"
#include "src/ops/float_dispatch.h"

namespace hpcnet::cuda {

// Makes t's device current and returns its stream.
cudaStream_t prepare(const Tensor& t);

cudnnHandle_t cudnn_handle(int device);
cublasLtHandle_t cublaslt_handle(int device);
// cuBLASLt's workspace on a device (allocated once) and its size.
void* cublaslt_workspace(int device);
constexpr size_t kCublasLtWorkspace = size_t{32} << 20;

// Blocks of `threads` covering n items, at most `cap` (kernels loop over the rest).
inline unsigned grid_for(int64_t n, int threads = 256, int64_t cap = 65535) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// Scratch device memory for the duration of one queued call (returned to the cache at scope
// exit; safe because later users queue behind on the same stream).
class Scratch {
 public:
  Scratch(size_t nbytes, int device) : n_(nbytes), dev_(device) {
    if (n_) p_ = cuda_cached_alloc(n_, dev_);
  }
  ~Scratch() { cuda_cached_free(p_, n_, dev_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t n_;
  int dev_;
};

// Calls f(T{}) with T = float or double by dtype; others are an error naming the op.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  ops::detail::dispatch_float(t, "CUDA", op, std::forward<F>(f));
}

// Largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
inline uint32_t alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// A plan-cache key: the op kind and up to 19 integers (device, dtype, shapes, flags).
struct PlanKey {
  std::array<int64_t, 20> v{};
  bool operator==(const PlanKey& o) const { return v == o.v; }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};
template <class... Ints>
PlanKey make_plan_key(Ints... ints) {
  static_assert(sizeof...(Ints) <= 20, "PlanKey holds 20 integers");
  PlanKey k;
  size_t i = 0;
  ((k.v[i++] = static_cast<int64_t>(ints)), ...);
  return k;
}

// One cuBLASLt matmul, as linear.cu and bmm.cu build them: the descriptor, the A, B and D
// layouts (C is D) and the algorithm the heuristic chose. Owns and destroys its handles.
struct LtMatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtMatmulPlan() = default;
  LtMatmulPlan(const LtMatmulPlan&) = delete;
  LtMatmulPlan& operator=(const LtMatmulPlan&) = delete;
  ~LtMatmulPlan();
};
// The compute type for float32 (FP32, or TF32 after set_allow_tf32(true)) or float64 (FP64).
cublasComputeType_t lt_compute_type(DType dtype);
// Asks the heuristic for one algorithm for the plan's descriptor and layouts, under the
// workspace kCublasLtWorkspace and the byte alignments of A, B and C/D (align[0..2]); stores it
// in p.algo. False when cuBLASLt has none (or does not support the combination).
bool lt_pick_algo(cublasLtHandle_t lt, LtMatmulPlan& p, const uint32_t align[3]);

// Bias epilogues for when cuDNN or cuBLASLt cannot fuse them (own kernels, in bias.cu).
// y (outer, C, inner) += b (C,), then relu when asked.
void add_bias_act(Tensor& y, const Tensor& b, int64_t outer, int64_t channels, int64_t inner,
                  bool relu);
// db (C,) = sum of dy (outer, C, inner) over outer and inner (overwrites; fixed order). dy may be
// bfloat16 (a bfloat16 convolution's), db then float32.
void bias_grad(const Tensor& dy, Tensor& db, int64_t outer, int64_t channels, int64_t inner);
// bfloat16 around cuDNN's bfloat16 convolutions, with src/core/bf16.h's rounding (the CPU's):
// y[i] = bf16(x[i]) for n elements; and y (outer, C, inner) = float(yb) (+ b (C,) when b is not
// null), then relu when asked. Queued on s.
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s);
void bf16_to_f32_bias_act(const uint16_t* yb, float* y, const float* b, int64_t outer,
                          int64_t channels, int64_t inner, bool relu, cudaStream_t s);
// Channels-last around the NHWC bfloat16 convolutions (layout.cu): (n, c, hw) float32 or
// bfloat16 (src_bf16) -> (n, hw, c) bfloat16; and (n, hw, c) bfloat16 -> (n, c, hw) float32
// with the bias b (c,) (when not null) and relu fused. Queued on s.
void nchw_to_nhwc_bf16(const void* src, bool src_bf16, uint16_t* dst, int64_t n, int64_t c,
                       int64_t hw, cudaStream_t s);
void nhwc_bf16_to_nchw_f32(const uint16_t* src, float* dst, const float* b, int64_t n, int64_t c,
                           int64_t hw, bool relu, cudaStream_t s);

}  // namespace hpcnet::cuda
