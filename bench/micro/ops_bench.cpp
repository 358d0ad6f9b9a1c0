// Kernel micro-benchmarks (Google Benchmark) of CPU ops through the public API (hpcnet::F): conv2d
// 3x3 forward at ResNet-20's stage shapes, linear, batch_norm (training) and relu. Forward only,
// no autograd tape (inputs do not require grad). Also yolov8n's inference forward (eval mode, no
// graph) with its BatchNorms folded into the convolutions and without, in one run; and its predict
// forward of one image with C2f's concatenations in place and copied.
// Target hpcnet_micro_bench; see bench/README.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/tensor.h"
#include "src/nn/models/models.h"

namespace {

using hpcnet::Shape;
using hpcnet::Tensor;
namespace F = hpcnet::F;

// A float32 tensor of N(0, 1) draws from a fixed seed.
Tensor randn(const Shape& shape, uint64_t seed) {
  hpcnet::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(hpcnet::shape_numel(shape)));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return Tensor::from_vector(v, shape);
}

// FLOP per iteration, reported per second of wall time ("FLOP=150G/s").
benchmark::Counter flop_rate(double flop) {
  return benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate,
                            benchmark::Counter::OneK::kIs1000);
}

// x (N, C, H, W) * w (C, C, 3, 3), stride 1, padding 1, bias (C,): ResNet-20's convolutions.
void conv2d_3x3_forward(benchmark::State& state, int64_t n, int64_t c, int64_t hw) {
  const Tensor x = randn({n, c, hw, hw}, 1), w = randn({c, c, 3, 3}, 2), b = randn({c}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(F::conv2d(x, w, b, 1, 1));
  state.counters["FLOP"] = flop_rate(2.0 * n * c * c * 9 * hw * hw);
}

// x (N, IN) -> (N, OUT).
void linear_forward(benchmark::State& state, int64_t n, int64_t in, int64_t out) {
  const Tensor x = randn({n, in}, 1), w = randn({out, in}, 2), b = randn({out}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(F::linear(x, w, b));
  state.counters["FLOP"] = flop_rate(2.0 * n * in * out);
}

// Training-mode batch norm of (N, C, H, W): batch statistics, running statistics updated.
void batch_norm_forward(benchmark::State& state, int64_t n, int64_t c, int64_t hw) {
  const Tensor x = randn({n, c, hw, hw}, 1);
  const Tensor weight = Tensor::full({c}, 1.0), bias = Tensor::zeros({c});
  Tensor mean = Tensor::zeros({c}), var = Tensor::full({c}, 1.0);
  for (auto _ : state) benchmark::DoNotOptimize(F::batch_norm(x, weight, bias, mean, var, true));
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());  // read x, write y
}

void relu_forward(benchmark::State& state, int64_t n, int64_t c, int64_t hw) {
  const Tensor x = randn({n, c, hw, hw}, 1);
  for (auto _ : state) benchmark::DoNotOptimize(F::relu(x));
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}

// yolov8n (10 classes) on N images of S x S in eval mode without a graph, as eval and predict
// run it; fold: its BatchNorms folded into the convolutions (the default) or not.
void yolov8n_inference(benchmark::State& state, int64_t n, int64_t s, bool fold) {
  hpcnet::nn::set_inference_fusion(fold);
  auto model = hpcnet::nn::make_model("yolov8n", hpcnet::nn::ModelOptions{10});
  model->eval();
  const Tensor x = randn({n, 3, s, s}, 1);
  hpcnet::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(model->forward_all(x));
  state.SetItemsProcessed(state.iterations() * n);  // images/s
  hpcnet::nn::set_inference_fusion(true);
}

// yolov8n (10 classes) on one S x S image as predict runs it (eval, no graph, folded), with C2f's
// concatenations written in place (the default) or copied.
void yolov8n_predict(benchmark::State& state, int64_t s, bool in_place) {
  hpcnet::nn::set_concat_in_place(in_place);
  auto model = hpcnet::nn::make_model("yolov8n", hpcnet::nn::ModelOptions{10});
  model->eval();
  const Tensor x = randn({1, 3, s, s}, 1);
  hpcnet::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(model->forward_all(x));
  state.SetItemsProcessed(state.iterations());  // images/s
  hpcnet::nn::set_concat_in_place(true);
}

// The kernels run on OpenMP threads: iterations and rates by wall time, not the main thread's CPU
// time.
void wall_clock(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void register_all() {
  // ResNet-20 on CIFAR-10 (batch 32): 16 channels at 32x32, 32 at 16x16, 64 at 8x8.
  for (auto [c, hw] : std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {32, 16}, {64, 8}})
    benchmark::RegisterBenchmark(("conv2d_3x3_forward/N32_C" + std::to_string(c) + "_" +
                                  std::to_string(hw) + "x" + std::to_string(hw))
                                     .c_str(),
                                 conv2d_3x3_forward, 32, c, hw)
        ->Apply(wall_clock);
  benchmark::RegisterBenchmark("linear_forward/N4_400x120", linear_forward, 4, 400, 120)
      ->Apply(wall_clock);  // the tutorial Net's fc1 at batch 4
  benchmark::RegisterBenchmark("linear_forward/N128_512x512", linear_forward, 128, 512, 512)
      ->Apply(wall_clock);
  benchmark::RegisterBenchmark("batch_norm_forward/N32_C16_32x32", batch_norm_forward, 32, 16, 32)
      ->Apply(wall_clock);
  benchmark::RegisterBenchmark("relu_forward/N32_C16_32x32", relu_forward, 32, 16, 32)
      ->Apply(wall_clock);
  for (bool fold : {false, true})
    benchmark::RegisterBenchmark(
        fold ? "yolov8n_inference/N32_128x128/folded" : "yolov8n_inference/N32_128x128/unfolded",
        yolov8n_inference, 32, 128, fold)
        ->Apply(wall_clock);
  for (int64_t s : {128, 640})
    for (bool in_place : {false, true})
      benchmark::RegisterBenchmark(("yolov8n_predict/N1_" + std::to_string(s) + "x" +
                                    std::to_string(s) + (in_place ? "/cat_in_place" : "/cat_copied"))
                                       .c_str(),
                                   yolov8n_predict, s, in_place)
          ->Apply(wall_clock);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
