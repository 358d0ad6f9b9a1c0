// The staged TaskAlignedAssigner of tal_math.h on the GPU: one kernel per stage, each a grid over
// its elements, on hpcnet's stream for the device, so the v8 loss on CUDA never copies the head's
// outputs to the host. The topk stage is the one written differently: a block per gt row, whose
// threads find each round's best candidate together (largest metric, lowest anchor on ties: the
// rule of tal::topk, the host reference); the others call tal_math.h's functions.
#include "src/core/cuda_util.h"
#include "src/task/detect/tal_cuda.h"
#include "src/task/detect/tal_math.h"

namespace hpcnet::task::detect::tal {
namespace {

constexpr int kThreads = 256;

int blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void decode_kernel(View v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.B * v.A) decode(v, i / v.A, i % v.A);
}

__global__ void metric_kernel(View v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.B * v.N * v.A) metric(v, i / (v.N * v.A), (i / v.A) % v.N, i % v.A);
}

// Block (b N + j): topk rounds, each a block-wide argmax over the row's remaining candidates.
__global__ void topk_kernel(View v) {
  __shared__ float best_m[kThreads];
  __shared__ int64_t best_a[kThreads];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * v.A;
  uint8_t* pos = v.pos + row;
  const float* m = v.metric + row;
  for (int64_t r = 0; r < v.topk; ++r) {
    float bm = 0.f;
    int64_t ba = -1;
    for (int64_t a = threadIdx.x; a < v.A; a += blockDim.x)  // ascending: strict > keeps the lowest
      if (pos[a] == 1 && (ba < 0 || m[a] > bm)) {
        bm = m[a];
        ba = a;
      }
    best_m[threadIdx.x] = bm;
    best_a[threadIdx.x] = ba;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
      if (threadIdx.x < h) {
        const float om = best_m[threadIdx.x + h];
        const int64_t oa = best_a[threadIdx.x + h];
        const int64_t ma = best_a[threadIdx.x];
        if (oa >= 0 &&
            (ma < 0 || om > best_m[threadIdx.x] || (om == best_m[threadIdx.x] && oa < ma))) {
          best_m[threadIdx.x] = om;
          best_a[threadIdx.x] = oa;
        }
      }
      __syncthreads();
    }
    const int64_t winner = best_a[0];
    __syncthreads();         // every thread has read best_a[0] before the next round rewrites it
    if (winner < 0) return;  // fewer candidates than topk (the same answer in every thread)
    if (threadIdx.x == 0) pos[winner] = 2;
    __syncthreads();
  }
}

__global__ void resolve_kernel(View v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.B * v.A) resolve(v, i / v.A, i % v.A);
}

__global__ void stats_kernel(View v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.B * v.N) stats(v, i / v.N, i % v.N);
}

__global__ void target_kernel(View v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.B * v.A) target(v, i / v.A, i % v.A);
}

// One block: *sum = the target-score sum (the anchors' weights), in double, in a fixed order.
__global__ void score_sum_kernel(const float* __restrict__ weight, int64_t n, double* sum) {
  __shared__ double part[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += static_cast<double>(weight[i]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (static_cast<int>(threadIdx.x) < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum = part[0];
}

__global__ void inverse_kernel(const double* sum, float* inv) {
  const double s = *sum;
  *inv = static_cast<float>(1.0 / (s > 1.0 ? s : 1.0));  // target_scores.sum().clamp(min=1)
}

}  // namespace

void assign_cuda(const View& v, int device, double* score_sum) {
  cuda::set_device(device);
  cudaStream_t st = cuda::stream(device);
  decode_kernel<<<blocks(v.B * v.A), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(decode_kernel);
  metric_kernel<<<blocks(v.B * v.N * v.A), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(metric_kernel);
  topk_kernel<<<static_cast<unsigned>(v.B * v.N), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(topk_kernel);
  resolve_kernel<<<blocks(v.B * v.A), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(resolve_kernel);
  stats_kernel<<<blocks(v.B * v.N), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(stats_kernel);
  target_kernel<<<blocks(v.B * v.A), kThreads, 0, st>>>(v);
  HPCNET_CUDA_LAUNCH(target_kernel);
  score_sum_kernel<<<1, kThreads, 0, st>>>(v.weight, v.B * v.A, score_sum);
  HPCNET_CUDA_LAUNCH(score_sum_kernel);
}

void inverse_cuda(const double* score_sum, float* inverse, int device) {
  cuda::set_device(device);
  inverse_kernel<<<1, 1, 0, cuda::stream(device)>>>(score_sum, inverse);
  HPCNET_CUDA_LAUNCH(inverse_kernel);
}

}  // namespace hpcnet::task::detect::tal
