// CUDA 2-D convolution through cuDNN (its v7-style API, deprecated in cuDNN 9 but shipped): the
// forward with bias and ReLU fused by cudnnConvolutionBiasActivationForward (float32 with ReLU;
// elsewhere, or when cuDNN refuses, cudnnConvolutionForward and bias.cu's epilogue), backward
// data and backward filter, and the bias gradient by bias.cu's deterministic channel sum.
// Plain NCHW / KCRS tensors, cross-correlation as PyTorch. Algorithms come from cuDNN's
// heuristics (no timing runs, so a shape always gets the same algorithm); the backward passes
// take deterministic algorithms unless set_deterministic(false). float32 uses FMA math (no TF32)
// unless set_allow_tf32(true). Descriptors and algorithms are cached per thread by shape;
// workspaces come from the caching allocator.
// bfloat16 (--precision bf16, the CPU's rule mirrored: F::conv2d hands the kernels a bfloat16 x
// and, backward, a bfloat16 dy; weights, biases and gradients stay float32): cuDNN's
// BFLOAT16_CONFIG (bfloat16 x, w, y; float accumulation; tensor-op math). The kernel converts w
// to bfloat16 into scratch memory, and cuDNN's bfloat16 y, dx or dw back to float32, the bias and
// ReLU fused into that conversion (src/ops/backend/cuda/bias.cu). NCHW by default;
// HPCNET_CUDA_BF16_LAYOUT=nhwc runs them channels-last, every operand transposed on its way in
// and out (src/ops/backend/cuda/layout.cu), to time the two layouts on a GPU.
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/ops/backend/cuda/cuda_common.h"

namespace hpcnet::cuda {
namespace {

// The most workspace an algorithm may ask for.
constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

struct ConvShape {
  int64_t n, c, h, w, k, r, s, p, q;
};

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t workspace = 0;
  bool fused = false;         // forward through cudnnConvolutionBiasActivationForward
  bool fused_proven = false;  // the fused call has succeeded once with this plan
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (b) cudnnDestroyTensorDescriptor(b);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (act) cudnnDestroyActivationDescriptor(act);
  }
};

enum Kind { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

int i32(int64_t v, const char* what) {
  if (v > INT32_MAX) throw Error(std::string("conv2d: ") + what + " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

[[noreturn]] void no_algo(const char* pass, const ConvShape& s, DType dtype) {
  throw Error(std::string("conv2d: cuDNN has no usable ") + pass + " algorithm for x (" +
              std::to_string(s.n) + ", " + std::to_string(s.c) + ", " + std::to_string(s.h) + ", " +
              std::to_string(s.w) + "), w (" + std::to_string(s.k) + ", " + std::to_string(s.c) +
              ", " + std::to_string(s.r) + ", " + std::to_string(s.s) + "), " + dtype_name(dtype));
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kFloat32: return CUDNN_DATA_FLOAT;
    case DType::kFloat64: return CUDNN_DATA_DOUBLE;
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: throw Error(std::string("conv2d: no cuDNN type for ") + dtype_name(t));
  }
}

bool math_ok(cudnnMathType_t m, bool f32) {
  // Never a down-conversion to half precision; without TF32, float32 stays off tensor cores.
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return !f32 || allow_tf32() || m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH;
}

// The first of cuDNN's ranked candidates (perf[0, got)) that ran, fits the workspace cap, uses
// allowed math and, when asked, is deterministic; null if none does.
template <class Perf>
const Perf* first_usable(const std::vector<Perf>& perf, int got, bool deterministic, bool f32) {
  for (int i = 0; i < got; ++i) {
    const Perf& r = perf[i];
    if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxConvWorkspace &&
        (!deterministic || r.determinism == CUDNN_DETERMINISTIC) && math_ok(r.mathType, f32))
      return &r;
  }
  return nullptr;
}

// The layout of the bfloat16 convolutions: NCHW (cuDNN reorders inside where its kernels want
// channels-last), or NHWC with the operands transposed on their way in and out (layout.cu).
// HPCNET_CUDA_BF16_LAYOUT=nhwc selects NHWC, for timing the two on a GPU.
bool bf16_nhwc() {
  static const bool on = [] {
    const char* e = std::getenv("HPCNET_CUDA_BF16_LAYOUT");
    return e && std::string(e) == "nhwc";
  }();
  return on;
}

std::unique_ptr<ConvPlan> make_plan(cudnnHandle_t h, Kind kind, DType dtype, const ConvShape& s,
                                    const Conv2dParams& cp, bool bias, bool relu) {
  const bool f32 = dtype == DType::kFloat32, bf16 = dtype == DType::kBFloat16;
  const cudnnDataType_t dt = cudnn_type(dtype);
  // bfloat16 data accumulates in float (cuDNN's BFLOAT16_CONFIG).
  const cudnnDataType_t compute = dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  auto p = std::make_unique<ConvPlan>();
  HPCNET_CUDNN(cudnnCreateTensorDescriptor(&p->x));
  HPCNET_CUDNN(cudnnCreateTensorDescriptor(&p->y));
  HPCNET_CUDNN(cudnnCreateFilterDescriptor(&p->w));
  HPCNET_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
  // NHWC (bfloat16 only, bf16_nhwc()): the filter's format is then KRSC.
  const cudnnTensorFormat_t fmt = bf16 && bf16_nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  HPCNET_CUDNN(cudnnSetTensor4dDescriptor(p->x, fmt, dt, i32(s.n, "N"), i32(s.c, "C"),
                                          i32(s.h, "H"), i32(s.w, "W")));
  HPCNET_CUDNN(cudnnSetTensor4dDescriptor(p->y, fmt, dt, i32(s.n, "N"), i32(s.k, "K"),
                                          i32(s.p, "P"), i32(s.q, "Q")));
  HPCNET_CUDNN(cudnnSetFilter4dDescriptor(p->w, dt, fmt, i32(s.k, "K"), i32(s.c, "C"),
                                          i32(s.r, "R"), i32(s.s, "S")));
  HPCNET_CUDNN(cudnnSetConvolution2dDescriptor(
      p->conv, i32(cp.pad_h, "pad"), i32(cp.pad_w, "pad"), i32(cp.stride_h, "stride"),
      i32(cp.stride_w, "stride"), i32(cp.dil_h, "dilation"), i32(cp.dil_w, "dilation"),
      CUDNN_CROSS_CORRELATION, compute));
  // CUDNN_DEFAULT_MATH lets float32 use TF32 tensor cores; CUDNN_FMA_MATH keeps it in FP32;
  // bfloat16 runs on the tensor cores.
  HPCNET_CUDNN(cudnnSetConvolutionMathType(
      p->conv, bf16                  ? CUDNN_TENSOR_OP_MATH
               : f32 && allow_tf32() ? CUDNN_DEFAULT_MATH
                                     : CUDNN_FMA_MATH));
  int on, oc, oh, ow;
  HPCNET_CUDNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
  HPCNET_CHECK(on == s.n && oc == s.k && oh == s.p && ow == s.q,
               "conv2d: cuDNN's output shape differs from hpcnet's");

  if (kind == kForward) {
    if (bias) {
      HPCNET_CUDNN(cudnnCreateTensorDescriptor(&p->b));
      HPCNET_CUDNN(cudnnSetTensor4dDescriptor(p->b, CUDNN_TENSOR_NCHW, dt, 1, i32(s.k, "K"), 1, 1));
    }
    // Fused bias + ReLU: float32 with a bias and a ReLU (cuDNN's identity activation is limited
    // to one algorithm; double is not among its fused configurations).
    p->fused = f32 && bias && relu;
    if (p->fused) {
      HPCNET_CUDNN(cudnnCreateActivationDescriptor(&p->act));
      HPCNET_CUDNN(cudnnSetActivationDescriptor(p->act, CUDNN_ACTIVATION_RELU,
                                                CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    int max = 0, got = 0;
    HPCNET_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max));
    HPCNET_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, max, &got,
                                                        perf.data()));
    if (const auto* r = first_usable(perf, got, false, f32)) {
      p->fwd = r->algo;
      p->workspace = r->memory;
      return p;
    }
    no_algo("forward", s, dtype);
  }
  if (kind == kBackwardData) {
    int max = 0, got = 0;
    HPCNET_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max));
    HPCNET_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x, max,
                                                             &got, perf.data()));
    if (const auto* r = first_usable(perf, got, deterministic(), f32)) {
      p->bwd_data = r->algo;
      p->workspace = r->memory;
      return p;
    }
    no_algo(deterministic() ? "deterministic backward-data" : "backward-data", s, dtype);
  }
  int max = 0, got = 0;
  HPCNET_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max));
  HPCNET_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w, max,
                                                             &got, perf.data()));
  if (const auto* r = first_usable(perf, got, deterministic(), f32)) {
    p->bwd_filter = r->algo;
    p->workspace = r->memory;
    return p;
  }
  no_algo(deterministic() ? "deterministic backward-filter" : "backward-filter", s, dtype);
}

ConvPlan& plan_for(int device, Kind kind, DType dtype, const ConvShape& s, const Conv2dParams& cp,
                   bool bias, bool relu) {
  thread_local auto* cache =
      new std::unordered_map<PlanKey, std::unique_ptr<ConvPlan>, PlanKeyHash>();
  const int type_key = static_cast<int>(dtype) * 2 + (dtype == DType::kBFloat16 && bf16_nhwc());
  PlanKey key = make_plan_key(kind, device, type_key, s.n, s.c, s.h, s.w, s.k, s.r,
                              s.s, cp.stride_h, cp.stride_w, cp.pad_h, cp.pad_w, cp.dil_h, cp.dil_w,
                              bias, relu, allow_tf32(), deterministic());
  auto it = cache->find(key);
  if (it != cache->end()) return *it->second;
  auto p = make_plan(cudnn_handle(device), kind, dtype, s, cp, bias, relu);
  return *cache->emplace(key, std::move(p)).first->second;
}

ConvShape conv_shape(const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3]};
}

struct Scalars {
  float one_f = 1.f, zero_f = 0.f;
  double one_d = 1.0, zero_d = 0.0;
  const void* one(DType t) const { return t == DType::kFloat64 ? (const void*)&one_d : &one_f; }
  const void* zero(DType t) const { return t == DType::kFloat64 ? (const void*)&zero_d : &zero_f; }
};

bool empty_conv(const ConvShape& s) {
  return s.n == 0 || s.k == 0 || s.c == 0 || s.p == 0 || s.q == 0;
}

// An operand of a bfloat16 convolution as cuDNN reads it: a float32 tensor (the weights)
// converted into scratch memory, or a bfloat16 one (x, dy) as it is; with bf16_nhwc(), either
// transposed to channels-last ((N, C, H, W) -> (N, H, W, C); the weights (K, C, R, S) -> KRSC)
// into scratch memory.
struct Bf16Operand {
  Scratch mem;
  const void* ptr = nullptr;
  Bf16Operand(const Tensor& t, int dev, cudaStream_t s)
      : mem(t.dtype() == DType::kBFloat16 && !bf16_nhwc() ? 0 : 2 * static_cast<size_t>(t.numel()),
            dev) {
    const bool is_bf16 = t.dtype() == DType::kBFloat16;
    HPCNET_CHECK(t.dim() == 4 && t.is_contiguous() && (is_bf16 || t.dtype() == DType::kFloat32),
                 "conv2d (bfloat16): operands are contiguous float32 or bfloat16, got " +
                     std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()));
    auto* out = static_cast<uint16_t*>(mem.get());
    ptr = out;
    if (bf16_nhwc())
      nchw_to_nhwc_bf16(t.raw_data(), is_bf16, out, t.size(0), t.size(1), t.size(2) * t.size(3), s);
    else if (!is_bf16)
      convert_f32_to_bf16(t.data<float>(), out, t.numel(), s);
    else
      ptr = t.raw_data();
  }
  void* get() const { return const_cast<void*>(ptr); }
};

// A bfloat16 result written by cuDNN into scratch memory, then into out (float32, (N, C, H, W)
// or the weights' (K, C, R, S)) with the bias (may be undefined) over its channels and relu fused.
void store_bf16_result(const Scratch& r, Tensor& out, const Tensor& b, bool relu, cudaStream_t st) {
  HPCNET_CHECK(out.dtype() == DType::kFloat32 && out.is_contiguous(),
               "conv2d (bfloat16): results are written as contiguous float32, got " +
                   std::string(dtype_name(out.dtype())));
  const auto* src = static_cast<const uint16_t*>(r.get());
  const float* bias = b.defined() ? b.data<float>() : nullptr;
  const int64_t n = out.size(0), c = out.size(1), hw = out.size(2) * out.size(3);
  if (bf16_nhwc())  // (N, H, W, C) back to (N, C, H, W); the weights' KRSC back to KCRS
    nhwc_bf16_to_nchw_f32(src, out.data<float>(), bias, n, c, hw, relu, st);
  else
    bf16_to_f32_bias_act(src, out.data<float>(), bias, n, c, hw, relu, st);
}

// One of the three passes in bfloat16 (x, dy bfloat16; w, b, y, dx, dw float32): the plan of
// `kind`, its two operands as cuDNN reads them (Bf16Operand), cuDNN's call (call(handle, plan,
// a, b, workspace, result, &one, &zero) returns its status) writing a bfloat16 result into
// scratch memory, and that result stored into out with the bias and relu.
template <class Call>
void run_bf16(Kind kind, const Tensor& a, const Tensor& b, Tensor& out, const Tensor& bias,
              bool relu, const Conv2dParams& p, const ConvShape& s, Call&& call) {
  const int dev = a.device().index;
  cudaStream_t st = prepare(a);
  ConvPlan& plan = plan_for(dev, kind, DType::kBFloat16, s, p, false, false);
  Bf16Operand ab(a, dev, st), bb(b, dev, st);
  Scratch result(2 * static_cast<size_t>(out.numel()), dev), ws(plan.workspace, dev);
  const float one = 1.f, zero = 0.f;
  HPCNET_CUDNN(call(cudnn_handle(dev), plan, ab.get(), bb.get(), ws.get(), result.get(), &one,
                    &zero));
  store_bf16_result(result, out, bias, relu, st);
}

void conv2d_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                         const Conv2dParams& p, Act act, const ConvShape& s) {
  run_bf16(kForward, x, w, y, b, act == Act::kRelu, p, s,
           [](cudnnHandle_t h, ConvPlan& pl, void* xb, void* wb, void* ws, void* yb,
              const float* one, const float* zero) {
             return cudnnConvolutionForward(h, one, pl.x, xb, pl.w, wb, pl.conv, pl.fwd, ws,
                                            pl.workspace, zero, pl.y, yb);
           });
  if (act == Act::kSilu) silu_forward(y, y);
}

void conv2d_backward_data_bf16(const Tensor& dy, const Tensor& w, Tensor& dx,
                               const Conv2dParams& p, const ConvShape& s) {
  run_bf16(kBackwardData, w, dy, dx, Tensor(), false, p, s,
           [](cudnnHandle_t h, ConvPlan& pl, void* wb, void* dyb, void* ws, void* dxb,
              const float* one, const float* zero) {
             return cudnnConvolutionBackwardData(h, one, pl.w, wb, pl.y, dyb, pl.conv,
                                                 pl.bwd_data, ws, pl.workspace, zero, pl.x, dxb);
           });
}

void conv2d_backward_weights_bf16(const Tensor& x, const Tensor& dy, Tensor& dw,
                                  const Conv2dParams& p, const ConvShape& s) {
  run_bf16(kBackwardFilter, x, dy, dw, Tensor(), false, p, s,
           [](cudnnHandle_t h, ConvPlan& pl, void* xb, void* dyb, void* ws, void* dwb,
              const float* one, const float* zero) {
             return cudnnConvolutionBackwardFilter(h, one, pl.x, xb, pl.y, dyb, pl.conv,
                                                   pl.bwd_filter, ws, pl.workspace, zero, pl.w,
                                                   dwb);
           });
}

// The kernels' dtype check: float32 or float64, or a bfloat16 x (dy) with float32 weights.
bool bf16_pass(const Tensor& t, const char* op) {
  if (t.dtype() == DType::kBFloat16) return true;
  dispatch_float(t.dtype(), op, [](auto) {});
  return false;
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p, Act act) {
  // cuDNN's fused entry point has ReLU but no SiLU: SiLU is a pass over the output.
  const bool relu = act == Act::kRelu;
  const bool bf16 = bf16_pass(x, op_name::conv2d);
  prepare(x);
  int dev = x.device().index;
  ConvShape s = conv_shape(x.shape(), w.shape(), y.shape());
  bool has_b = b.defined();
  if (empty_conv(s)) {
    if (s.n && s.k && s.p && s.q) {  // C == 0: y = bias (relu'd)
      y.fill_(0.0);
      if (has_b) add_bias_act(y, b, s.n, s.k, s.p * s.q, relu);
      if (act == Act::kSilu) silu_forward(y, y);
    }
    return;
  }
  if (bf16) return conv2d_forward_bf16(x, w, b, y, p, act, s);
  ConvPlan& plan = plan_for(dev, kForward, x.dtype(), s, p, has_b, relu);
  cudnnHandle_t h = cudnn_handle(dev);
  Scratch ws(plan.workspace, dev);
  Scalars k;
  DType t = x.dtype();
  if (plan.fused) {
    // y = relu(conv(x) + 0 * z + b) with z = y, zeroed first so that garbage (NaN) in y cannot
    // leak through 0 * z whether or not cuDNN reads z when alpha2 = 0.
    HPCNET_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), stream(dev)));
    cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
        h, k.one(t), plan.x, x.raw_data(), plan.w, w.raw_data(), plan.conv, plan.fwd, ws.get(),
        plan.workspace, k.zero(t), plan.y, y.raw_data(), plan.b, b.raw_data(), plan.act, plan.y,
        y.raw_data());
    if (st == CUDNN_STATUS_SUCCESS) {
      plan.fused_proven = true;
      return;  // (fused only with ReLU or no activation: make_plan)
    }
    // A refusal on the first call (NOT_SUPPORTED, or BAD_PARAM for an algorithm the fused
    // entry point lacks) means this cuDNN cannot fuse this shape: unfused from now on. A failure
    // after the fusion has worked is a real error.
    if (plan.fused_proven || st == CUDNN_STATUS_EXECUTION_FAILED) HPCNET_CUDNN(st);
    plan.fused = false;
  }
  HPCNET_CUDNN(cudnnConvolutionForward(h, k.one(t), plan.x, x.raw_data(), plan.w, w.raw_data(),
                                       plan.conv, plan.fwd, ws.get(), plan.workspace, k.zero(t),
                                       plan.y, y.raw_data()));
  if (has_b)
    add_bias_act(y, b, s.n, s.k, s.p * s.q, relu);
  else if (relu)
    relu_forward(y, y);
  if (act == Act::kSilu) silu_forward(y, y);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p) {
  const bool bf16 = bf16_pass(dy, "conv2d_backward_data");
  prepare(dy);
  int dev = dy.device().index;
  ConvShape s = conv_shape(dx.shape(), w.shape(), dy.shape());
  if (empty_conv(s)) {
    if (dx.numel()) dx.fill_(0.0);
    return;
  }
  if (bf16) return conv2d_backward_data_bf16(dy, w, dx, p, s);
  ConvPlan& plan = plan_for(dev, kBackwardData, dy.dtype(), s, p, false, false);
  Scratch ws(plan.workspace, dev);
  Scalars k;
  DType t = dy.dtype();
  HPCNET_CUDNN(cudnnConvolutionBackwardData(
      cudnn_handle(dev), k.one(t), plan.w, w.raw_data(), plan.y, dy.raw_data(), plan.conv,
      plan.bwd_data, ws.get(), plan.workspace, k.zero(t), plan.x, dx.raw_data()));
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             const Conv2dParams& p) {
  const bool bf16 = bf16_pass(x, "conv2d_backward_weights");
  prepare(x);
  int dev = x.device().index;
  ConvShape s = conv_shape(x.shape(), dw.shape(), dy.shape());
  if (db.defined()) bias_grad(dy, db, s.n, s.k, s.p * s.q);
  if (empty_conv(s)) {
    if (dw.numel()) dw.fill_(0.0);
    return;
  }
  if (bf16) return conv2d_backward_weights_bf16(x, dy, dw, p, s);
  ConvPlan& plan = plan_for(dev, kBackwardFilter, x.dtype(), s, p, false, false);
  Scratch ws(plan.workspace, dev);
  Scalars k;
  DType t = x.dtype();
  HPCNET_CUDNN(cudnnConvolutionBackwardFilter(
      cudnn_handle(dev), k.one(t), plan.x, x.raw_data(), plan.y, dy.raw_data(), plan.conv,
      plan.bwd_filter, ws.get(), plan.workspace, k.zero(t), plan.w, dw.raw_data()));
}

void to_bfloat16(const Tensor& x, Tensor& y) {
  HPCNET_CHECK(x.is_contiguous() && y.is_contiguous(), "to_bf16: CUDA tensors are row-major");
  convert_f32_to_bf16(x.data<float>(), static_cast<uint16_t*>(y.raw_data()), x.numel(), prepare(x));
}

void channel_bias_add_inplace(Tensor& y, const Tensor& b) {
  dispatch_float(y.dtype(), "channel_bias_add", [](auto) {});
  prepare(y);
  if (y.numel()) add_bias_act(y, b, y.size(0), y.size(1), y.size(2) * y.size(3), false);
}

void channel_bias_backward(const Tensor& dy, Tensor& db) {
  dispatch_float(dy.dtype(), "channel_bias_backward", [](auto) {});
  prepare(dy);
  bias_grad(dy, db, dy.size(0), dy.size(1), dy.size(2) * dy.size(3));
}

}  // namespace hpcnet::cuda
