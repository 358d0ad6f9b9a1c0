// The test cases of depthwise_conv2d (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks and error inputs. Compiled
// into the test binary only.
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"

namespace hpcnet {
namespace {

// Depthwise nn::Conv2d modules (groups = 3): 3x3 with bias, then stride 2, dilation 2, no bias.
struct DepthwiseNet : nn::Module {
  std::shared_ptr<nn::Conv2d> a, b;
  DepthwiseNet() {
    a = register_module("a", std::make_shared<nn::Conv2d>(3, 3, 3, 1, 1, true, 1, 3));
    b = register_module("b", std::make_shared<nn::Conv2d>(3, 3, 3, 2, 2, false, 2, 3));
  }
  Tensor forward(const Tensor& x) override { return b->forward(a->forward(x)); }
};

using namespace ops::cases;
using D = Device;

// x, w (C, 1, R, S) and, when bias, b (C,).
ops::CaseInputs dw(Shape x, Shape w, bool bias) {
  return [x, w, bias](Rng& r) {
    std::vector<Tensor> v{randn64(x, r), randn64(w, r)};
    if (bias) v.push_back(randn64({w[0]}, r));
    return v;
  };
}

std::vector<ops::SampleCase> depthwise_conv2d_samples() {
  return {
      {"depthwise_conv2d 3x3 pad 1 bias",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); },
       dw({2, 3, 5, 6}, {3, 1, 3, 3}, true), ops::kCheckGrad | ops::kCheckCudaParity},
      {"depthwise_conv2d stride 2 no bias",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 1); },
       dw({2, 2, 7, 6}, {2, 1, 3, 3}, false), ops::kCheckGrad | ops::kCheckCudaParity},
      {"depthwise_conv2d dilation 2 pad 2 5x5",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 2, 2); },
       dw({1, 3, 6, 7}, {3, 1, 5, 5}, true), ops::kCheckGrad | ops::kCheckCudaParity},
      {"depthwise_conv2d 2x3 filter stride 3 pad 0",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 3, 0); },
       dw({2, 2, 8, 8}, {2, 1, 2, 3}, true), ops::kCheckGrad | ops::kCheckCudaParity},
      {"depthwise_conv2d parity (2, 64, 20, 20) (64, 1, 3, 3) (64)",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 64, 20, 20}, r), randn64({64, 1, 3, 3}, r),
                                    randn64({64}, r)};
       },
       ops::kCheckCudaParity},
      {"depthwise_conv2d parity (2, 5, 13, 11) (5, 1, 5, 3)",
       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 2, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 5, 13, 11}, r), randn64({5, 1, 5, 3}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> depthwise_conv2d_errors() {
  return {
      err("weight (C, 2, R, S)",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 2, 3, 3}, d), kNone);
          },
          {"(C, 1, R, S)", "C = 4", "(4, 2, 3, 3)"}),
      err("weight channels differ from the input's",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({3, 1, 3, 3}, d), kNone);
          },
          {"(C, 1, R, S)", "(3, 1, 3, 3)"}),
      err("input of rank 3",
          [](D d) {
            return F::depthwise_conv2d(f32({4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone);
          },
          {"(N, C, H, W)", "(4, 8, 8)"}),
      err("bias of the wrong size",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(4,)", "(3,)"}),
      err("float64 weight with a float32 input",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f64({4, 1, 3, 3}, d), kNone);
          },
          {"float64", "float32"}),
      err("int64 input",
          [](D d) {
            return F::depthwise_conv2d(i64({1, 4, 8, 8}, d), i64({4, 1, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("stride 0",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("kernel larger than the padded input",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 2, 2}, d), f32({4, 1, 5, 5}, d), kNone);
          },
          {"larger than the padded input"}),
      ok("empty batch",
         [](D d) {
           return F::depthwise_conv2d(f32({0, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone, 2, 1);
         },
         {0, 4, 4, 4}),
  };
}

}  // namespace

ops::OpCases op_cases::depthwise_conv2d() {
  return {.samples = depthwise_conv2d_samples(),
          .errors = depthwise_conv2d_errors(),
          .goldens = {{op_name::depthwise_conv2d,
                       {"x", "w", "b"},
                       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); }},
                      {"depthwise_conv2d_s2d2",
                       {"x", "w"},
                       [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 2, 2); }}},
          .onnx = {{"nn::Conv2d groups 3: 3x3 with bias, then stride 2, dilation 2, no bias",
                    nullptr,
                    nullptr,
                    {{"Conv", 2}},
                    3,
                    6,
                    6,
                    {{"group", 3}},
                    [] { return std::make_shared<DepthwiseNet>(); }}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
