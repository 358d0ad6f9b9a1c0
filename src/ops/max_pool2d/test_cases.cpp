// The test cases of max_pool2d (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs, PyTorch
// goldens, ONNX round trips and kernel-level CUDA parity checks (outputs pre-filled with NaN).
// Compiled into the test binary only.
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"

namespace hpcnet {
namespace {

using namespace ops::cases;
using namespace ops::case_checks;
using D = Device;

std::vector<ops::SampleCase> max_pool2d_samples() {
  return {
      {"max_pool2d 2x2", [](auto& v) { return F::max_pool2d(v[0], 2, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 6, 6}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"max_pool2d 3x3 stride 2 pad 1", [](auto& v) { return F::max_pool2d(v[0], 3, 2, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 7, 7}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> max_pool2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::max_pool2d(f32({3, 8, 8}, d), 2);
          },
          {"(3, 8, 8)"}),
      err("kernel_size 0",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 0);
          },
          {"kernel_size 0"}),
      err("stride -1",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, -1);
          },
          {"stride -1"}),
      err("padding -1",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, 2, -1);
          },
          {"padding -1"}),
      err("padding over half the kernel",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, 2, 2);
          },
          {"padding 2"}),
      err("window larger than the input",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 2, 2}, d), 3);
          },
          {"(1, 3, 2, 2)"}),
      err("int64 input",
          [](D d) {
            return F::max_pool2d(i64({1, 3, 8, 8}, d), 2);
          },
          {"int64"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::max_pool2d(f32({0, 3, 8, 8}, d), 2);
         },
         {0, 3, 4, 4}),
      err("undefined input", [](D) { return F::max_pool2d(kNone, 2); }, {"undefined"}),
  };
}

// (was CudaParity.MaxPool2dWithTheCpuWorkspace in tests/ops/test_cuda.cpp)
void max_pool2d_kernel_parity() {
  struct Case {
    Shape x;
    ops::Pool2dParams p;
  };
  std::vector<Case> cases = {{{4, 6, 28, 28}, {2, 2, 2, 2, 0, 0}},
                             {{2, 3, 7, 7}, {3, 3, 2, 2, 1, 1}},
                             {{1, 2, 9, 8}, {3, 2, 1, 2, 1, 0}}};
  Rng rng(12);
  for (DType t : kFloatTypes)
    for (auto& c : cases) {
      Tensor x = randn(c.x, rng, t);
      // Ties: a plane of equal values, so "first maximum" is exercised.
      Tensor xc = x.contiguous();
      if (t == DType::kFloat32) std::fill(xc.data<float>(), xc.data<float>() + c.x[3] * 2, 0.5f);
      Shape ys = {c.x[0], c.x[1], ops::conv_out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h),
                  ops::conv_out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w)};
      Tensor dy = randn(ys, rng, t);
      std::string tag = std::string("max_pool2d ") + dtype_name(t) + " " + shape_str(c.x);
      Tensor y = nan_cpu(ys, t), dx = nan_cpu(c.x, t), ws;
      ops::max_pool2d_forward(xc, y, &ws, c.p);
      ops::max_pool2d_backward(dy, ws, dx, c.p);
      Tensor gy = nan_gpu(ys, t), gdx = nan_gpu(c.x, t), gws;
      ops::max_pool2d_forward(gpu(xc), gy, &gws, c.p);
      ops::max_pool2d_backward(gpu(dy), gws, gdx, c.p);
      expect_close(gy, y, 0, tag + " y");  // a maximum is exact
      expect_equal_ints(gws, ws, tag + " argmax positions");
      expect_close(gdx, dx, tol_for(t), tag + " dx");
      Tensor gy2 = nan_gpu(ys, t);  // without a workspace (inference)
      ops::max_pool2d_forward(gpu(xc), gy2, nullptr, c.p);
      expect_close(gy2, y, 0, tag + " y without workspace");
    }
}

}  // namespace

ops::OpCases op_cases::max_pool2d() {
  return {.samples = max_pool2d_samples(),
          .errors = max_pool2d_errors(),
          .goldens = {{"max_pool2d_k2s2", {"x"}, [](auto& v) { return F::max_pool2d(v[0], 2, 2); }},
                      {"max_pool2d_k3s2p1",
                       {"x"},
                       [](auto& v) { return F::max_pool2d(v[0], 3, 2, 1); }}},
          .checks = {{"CudaParity",
                      "the kernels with the CPU workspace, ties, outputs pre-filled with NaN",
                      max_pool2d_kernel_parity}},
          .onnx = {{"max_pool2d 3x3 stride 2 pad 1",
                    [](const Tensor& x, auto&) { return F::max_pool2d(x, 3, 2, 1); },
                    nullptr,
                    {{"MaxPool", 1}}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
