// The backend-neutral kernel API: what autograd wrappers and optimizers call. Each function checks
// its arguments, then dispatches on the device to src/ops/<family>/cpu.cpp (or cuda.cu). Kernels
// OVERWRITE their outputs unless the name ends in _inplace or the contract says "accumulates".
// CPU kernels take float32 (oneDNN where it applies) and float64 (plain loops, for gradient
// checks).
#pragma once

#include <cstdint>
#include <vector>

#include "hpcnet/tensor.h"
#include "src/ops/op_table.h"

namespace hpcnet::ops {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;  // dilation (torch's convention: 1 = none)
  // CPU forward only: compute in bfloat16 whatever x's dtype (a float32 x is converted on its way
  // into the primitive, in the same pass as its reorder). Set by inference under --precision bf16.
  bool bf16 = false;
  // CPU forward of float32 x only, > 0: compute in int8 (post-training quantisation, `hpcnet
  // quantize`): x quantised per tensor as round(x / int8_scale) clamped to [-127, 127] (in the
  // pass that reorders it), the weights per output channel to 127 / max |w[k]|, int32
  // accumulation (oneDNN: VNNI or AMX), the output float32 with the bias and the activation.
  float int8_scale = 0;
};
// The activation a convolution's forward kernel applies to its output (oneDNN post-op, cuDNN's
// fused activation, or a pass over the output where neither applies).
enum class Act : int { kNone = 0, kRelu = 1, kSilu = 2 };
// Output spatial size of a convolution or pooling window (dilation d spreads the k taps over
// d (k - 1) + 1 pixels, as torch.nn.Conv2d).
inline int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil = 1) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};

// Fused AdamW (torch.optim.AdamW, amsgrad=False), per element at step t (from 1):
//   p -= lr * weight_decay * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t step = 1;
};
// Batch normalisation (see batch_norm_forward in kernels.inc).
struct BatchNormParams {
  double eps = 1e-5, momentum = 0.1;
  bool training = true;
  bool relu = false;  // forward applies relu after the affine map and the residual
};
// Fused SGD over all parameters (torch.optim.SGD's rule); bufs[i] undefined on the first step.
struct SgdParams {
  double lr = 0.001, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffers start as a copy of the gradient
};

#include "src/ops/kernels.inc"

// Compute precision of float32 convolutions on the CPU: kFloat32, or kBFloat16 (inputs and
// weights rounded to bfloat16, products accumulated and results written in float32, the CPU
// analogue of torch.autocast(dtype=torch.bfloat16) for convolutions). Tensors stay float32.
enum class Precision { kFloat32, kBFloat16 };
void set_conv_precision(Precision p);
Precision conv_precision();
// --precision int8 (inference): the convolutions a model has calibrated input ranges for
// (nn::YoloConv::int8_input_max, `hpcnet quantize`) compute in int8 (Conv2dParams::int8_scale);
// the others as under kBFloat16, which is set with it.
void set_int8_inference(bool on);
bool int8_inference();
// Whether this CPU runs oneDNN's bfloat16 convolutions: AVX-512 (BW, VL, DQ; oneDNN emulates
// the bf16 arithmetic there) or better. Without it (an AVX2-only CPU) kBFloat16 is refused.
bool cpu_supports_bf16();
// Whether a convolution of x (N, C, H, W) by weights w (K, C, R, S) computes in bfloat16 when
// its gradient is recorded (training): under --precision bf16, the CPU's rule
// (cpu::conv2d_uses_bf16: stride 1, channels in multiples of 16, where oneDNN's bf16 kernels
// are faster) and on CUDA every float32 convolution (cuDNN's bfloat16 tensor-core kernels,
// torch.autocast's choice). F::conv2d then hands the kernels x's bfloat16 copy (to_bf16).
bool conv2d_uses_bf16(const Tensor& x, const Shape& w, const Conv2dParams& p);
// A float32 tensor's bfloat16 copy, same shape, layout and device (the tensor itself when it is
// bfloat16): round to nearest even, src/core/bf16.h's rounding on both devices.
Tensor to_bf16(const Tensor& t);

// CUDA float32 math and algorithms (--tf32, --deterministic; nothing on the CPU or in a build
// without CUDA): TF32 tensor cores for float32 convolutions and matrix products, and cuDNN's
// backward convolutions restricted to deterministic algorithms. The library's defaults (TF32
// off, deterministic on) keep the CUDA tests' parity with the CPU; `hpcnet train` and `bench`
// take PyTorch's defaults (torch.backends.cudnn.allow_tf32 = True, deterministic = False)
// unless told otherwise.
void set_cuda_tf32(bool on);
void set_cuda_deterministic(bool on);

// The algorithm of float32 convolutions on the CPU (oneDNN's convolution_direct, _winograd and
// _auto). kWinograd: F(4x4, 3x3) Winograd (about 2x fewer multiplications; errors about 5x
// direct's, 2e-6 of the output's scale, far below bfloat16's) for every convolution oneDNN has it
// for (3x3, stride 1, undilated, float32), direct for the rest. kAuto: oneDNN's choice per shape
// (Winograd for those with a batch of 16 or more and enough channels). kDirect: always direct, as
// PyTorch's CPU convolutions. bfloat16 convolutions are direct whatever the setting.
enum class ConvAlgorithm { kAuto, kDirect, kWinograd };
void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm();

// The layout conv2d gives its output for input x and a weight of shape w: blocked where a CPU
// convolution runs on oneDNN's blocked kernels (see cpu::conv2d_wants_blocked), else row-major.
Layout conv2d_output_layout(const Tensor& x, const Shape& w, const Conv2dParams& p);

// Threads for CPU kernels (oneDNN and ours); 0 = all cores.
void set_num_threads(int n);
int get_num_threads();

}  // namespace hpcnet::ops
