// Channels-last (NHWC) conversions around cuDNN's bfloat16 convolutions when they run in NHWC
// (set_bf16_conv_layout): (N, C, HW) <-> (N, HW, C) with the element type converted on the way
// (src/core/bf16.h's rounding, the CPU's), and the bias and ReLU of a convolution's output fused
// into the conversion back to float32 NCHW. Tiled through shared memory (32 x 32, padded against
// bank conflicts) so that both sides are read and written along rows.
#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/elementwise/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kTile = 32, kRows = 8;

// The element conversions: float <-> bfloat16 (its bits as uint16_t), or a copy.
template <class D>
struct Convert;
template <>
struct Convert<float> {
  HPCNET_HD static float from(float v) { return v; }
  HPCNET_HD static float from(uint16_t v) { return math::bf16_to_float(v); }
};
template <>
struct Convert<uint16_t> {
  HPCNET_HD static uint16_t from(float v) { return math::float_to_bf16(v); }
  HPCNET_HD static uint16_t from(uint16_t v) { return v; }
};

// dst (N, HW, C)[n][i][c] = convert(src (N, C, HW)[n][c][i]). Grid (HW / 32, C / 32, N).
template <class S, class D>
__global__ void to_nhwc_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t C,
                               int64_t HW) {
  __shared__ S tile[kTile][kTile + 1];
  const int64_t n = blockIdx.z, c0 = int64_t{blockIdx.y} * kTile, i0 = int64_t{blockIdx.x} * kTile;
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t c = c0 + r, i = i0 + threadIdx.x;
    if (c < C && i < HW) tile[r][threadIdx.x] = src[(n * C + c) * HW + i];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t i = i0 + r, c = c0 + threadIdx.x;
    if (c < C && i < HW) dst[(n * HW + i) * C + c] = Convert<D>::from(tile[threadIdx.x][r]);
  }
}

// dst (N, C, HW)[n][c][i] = bias_act(convert(src (N, HW, C)[n][i][c]), b[c]) (b may be null).
template <class S>
__global__ void from_nhwc_kernel(const S* __restrict__ src, float* __restrict__ dst,
                                 const float* __restrict__ b, int64_t C, int64_t HW, bool relu) {
  __shared__ S tile[kTile][kTile + 1];
  const int64_t n = blockIdx.z, c0 = int64_t{blockIdx.y} * kTile, i0 = int64_t{blockIdx.x} * kTile;
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t i = i0 + r, c = c0 + threadIdx.x;
    if (c < C && i < HW) tile[r][threadIdx.x] = src[(n * HW + i) * C + c];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t c = c0 + r, i = i0 + threadIdx.x;
    if (c < C && i < HW)
      dst[(n * C + c) * HW + i] =
          math::bias_act(Convert<float>::from(tile[threadIdx.x][r]), b ? b[c] : 0.f, relu);
  }
}

dim3 tiles(int64_t n, int64_t c, int64_t hw) {
  HPCNET_CHECK(n <= 65535 && (c + kTile - 1) / kTile <= 65535,
               "NHWC conversion: more than 65535 images or 2 million channels");
  return dim3(static_cast<unsigned>((hw + kTile - 1) / kTile),
              static_cast<unsigned>((c + kTile - 1) / kTile), static_cast<unsigned>(n));
}

}  // namespace

void nchw_to_nhwc_bf16(const void* src, bool src_bf16, uint16_t* dst, int64_t n, int64_t c,
                       int64_t hw, cudaStream_t s) {
  if (n * c * hw == 0) return;
  if (src_bf16)
    to_nhwc_kernel<uint16_t, uint16_t><<<tiles(n, c, hw), dim3(kTile, kRows), 0, s>>>(
        static_cast<const uint16_t*>(src), dst, c, hw);
  else
    to_nhwc_kernel<float, uint16_t><<<tiles(n, c, hw), dim3(kTile, kRows), 0, s>>>(
        static_cast<const float*>(src), dst, c, hw);
  HPCNET_CUDA_LAUNCH(to_nhwc_kernel);
}

void nhwc_bf16_to_nchw_f32(const uint16_t* src, float* dst, const float* b, int64_t n, int64_t c,
                           int64_t hw, bool relu, cudaStream_t s) {
  if (n * c * hw == 0) return;
  from_nhwc_kernel<uint16_t><<<tiles(n, c, hw), dim3(kTile, kRows), 0, s>>>(src, dst, b, c, hw,
                                                                            relu);
  HPCNET_CUDA_LAUNCH(from_nhwc_kernel);
}

}  // namespace hpcnet::cuda
