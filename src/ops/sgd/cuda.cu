// CUDA fused SGD: one kernel launch updates up to kMaxTensors parameters (blockIdx.y picks the
// tensor, blocks stride over its elements), with math::sgd_element, the CPU's per-element rule
// in torch.optim.SGD's order. The table of pointers travels as a kernel argument, so a step
// queues no copy and waits for nothing.
#include <vector>

#include "src/ops/backend/cuda/cuda_common.h"
#include "src/ops/sgd/math.h"

namespace hpcnet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTensors = 36;  // keeps the argument table under 1.2 KB

template <class T>
struct SgdTable {
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  T* b[kMaxTensors];
  int64_t n[kMaxTensors];
};

template <class T>
__global__ void sgd_kernel(SgdTable<T> tab, math::SgdCoeffs<T> c) {
  int k = blockIdx.y;
  T* __restrict__ p = tab.p[k];
  const T* __restrict__ g = tab.g[k];
  T* __restrict__ b = tab.b[k];
  int64_t n = tab.n[k];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    T pi = p[i];
    math::sgd_element(pi, g[i], c.momentum ? b + i : nullptr, c);
    p[i] = pi;
  }
}

template <class T>
void run(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& bufs,
         const SgdParams& h, DType dtype, cudaStream_t s) {
  math::SgdCoeffs<T> c{static_cast<T>(h.lr),
                       static_cast<T>(h.weight_decay),
                       static_cast<T>(h.momentum),
                       static_cast<T>(1.0 - h.dampening),
                       h.momentum != 0,
                       h.first_step,
                       h.nesterov};
  SgdTable<T> tab{};
  int count = 0;
  int64_t max_n = 0;
  auto flush = [&] {
    if (count == 0) return;
    dim3 grid(grid_for(max_n, kThreads, 1024), static_cast<unsigned>(count));
    sgd_kernel<T><<<grid, kThreads, 0, s>>>(tab, c);
    HPCNET_CUDA_LAUNCH(sgd_kernel);
    count = 0;
    max_n = 0;
  };
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined() || params[k].dtype() != dtype || params[k].numel() == 0) continue;
    HPCNET_CHECK(!c.momentum || bufs[k].defined(), "sgd_step: momentum buffer missing");
    tab.p[count] = params[k].data<T>();
    tab.g[count] = grads[k].data<T>();
    tab.b[count] = c.momentum ? bufs[k].data<T>() : nullptr;
    tab.n[count] = params[k].numel();
    if (tab.n[count] > max_n) max_n = tab.n[count];
    if (++count == kMaxTensors) flush();
  }
  flush();
}

}  // namespace

void sgd_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              std::vector<Tensor>& bufs, const SgdParams& h) {
  if (params.empty()) return;
  cudaStream_t s = prepare(params[0]);
  bool f32 = false, f64 = false;
  for (size_t k = 0; k < params.size(); ++k) {
    if (!grads[k].defined()) continue;
    DType t = params[k].dtype();
    if (t == DType::kFloat32)
      f32 = true;
    else if (t == DType::kFloat64)
      f64 = true;
    else
      dispatch_float(t, "sgd_step", [](auto) {});  // throws, naming the dtype
  }
  if (f32) run<float>(params, grads, bufs, h, DType::kFloat32, s);
  if (f64) run<double>(params, grads, bufs, h, DType::kFloat64, s);
}

}  // namespace hpcnet::cuda
