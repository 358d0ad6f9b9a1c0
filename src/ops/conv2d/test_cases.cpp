// The test cases of conv2d and conv_transpose2d (src/ops/op_cases.h; tests/ops/op_checks.cpp runs
// them as Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs,
// PyTorch goldens, ONNX round trips, kernel-level CUDA parity checks (outputs pre-filled with NaN)
// and the bfloat16 check. Compiled into the test binary only.
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"

namespace hpcnet {

// ops::set_conv_precision(kBFloat16): the Bf16 check (tests/ops/test_conv2d_bf16.cpp, beside the
// other tests of the precision switch).
namespace test_util {
void conv2d_runs_in_bfloat16();
void conv2d_cuda_runs_in_bfloat16();
}  // namespace test_util

namespace {

using namespace ops::cases;
using namespace ops::case_checks;
using D = Device;

std::vector<ops::SampleCase> conv2d_samples() {
  return {
      {"conv2d stride 1 pad 1", [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 6, 6}, r), randn64({4, 3, 3, 3}, r),
                                    randn64({4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv2d stride 2 pad 0 no bias",
       [](auto& v) { return F::conv2d(v[0], v[1], Tensor(), 2, 0); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 7, 7}, r), randn64({3, 2, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv2d_relu 5x5", [](auto& v) { return F::conv2d_relu(v[0], v[1], v[2], 1, 0); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 8, 8}, r), randn64({2, 3, 5, 5}, r),
                                    randn64({2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv2d_silu (under autograd: conv2d then silu)",
       [](auto& v) { return F::conv2d_silu(v[0], v[1], v[2], 2, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 7, 7}, r), randn64({4, 3, 3, 3}, r),
                                    randn64({4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv2d dilation 2 padding 2", [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 2, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 5, 6}, r), randn64({3, 2, 3, 3}, r),
                                    randn64({3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv2d dilation 3 stride 2 (relu fused)",
       [](auto& v) { return F::conv2d_relu(v[0], v[1], Tensor(), 2, 1, 3); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 7, 7}, r), randn64({2, 2, 2, 2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> conv2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::conv2d(f32({3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"(3, 8, 8)"}),
      err("weight of rank 2",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 27}, d), kNone);
          },
          {"(4, 27)", "(1, 3, 8, 8)"}),
      err("weight channels differ from the input's",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 2, 3, 3}, d), kNone);
          },
          {"(4, 2, 3, 3)", "(1, 3, 8, 8)"}),
      err("bias of the wrong size",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(4,)"}),
      err("int64 input and weight",
          [](D d) {
            return F::conv2d(i64({1, 3, 8, 8}, d), i64({4, 3, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("uint8 input",
          [](D d) {
            return F::conv2d(u8({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"uint8"}),
      err("float64 weight with a float32 input",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f64({4, 3, 3, 3}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("stride 0",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("padding -1",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 1, -1);
          },
          {"padding -1"}),
      err("dilation 0",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 1, 0, 0);
          },
          {"dilation 0"}),
      err("kernel larger than the input",
          [](D d) {
            return F::conv2d(f32({1, 3, 2, 2}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"(4, 3, 3, 3)", "(1, 3, 2, 2)"}),
      err("kernel larger than the input, stride 2",
          [](D d) {
            return F::conv2d(f32({1, 3, 2, 2}, d), f32({4, 3, 3, 3}, d), kNone, 2);
          },
          {"(4, 3, 3, 3)", "(1, 3, 2, 2)"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::conv2d(f32({0, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), f32({4}, d));
         },
         {0, 4, 6, 6}),
      err("input with 0 channels",
          [](D d) {
            return F::conv2d(f32({1, 0, 8, 8}, d), f32({4, 0, 3, 3}, d), kNone);
          },
          {"(1, 0, 8, 8)"}),
      err("undefined input",
          [](D d) {
            return F::conv2d(kNone, f32({4, 3, 3, 3}, d), kNone);
          },
          {"undefined"}),
      err("undefined weight",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), kNone, kNone);
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> conv_transpose2d_samples() {
  return {
      {"conv_transpose2d k2 stride 2 with bias",
       [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 0, 0); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 3, 2}, r), randn64({3, 2, 2, 2}, r),
                                    randn64({2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv_transpose2d k3 stride 2 padding 1 output_padding 1",
       [](auto& v) { return F::conv_transpose2d(v[0], v[1], Tensor(), 2, 1, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 3, 3}, r), randn64({2, 3, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"conv_transpose2d k3 stride 1 dilation 2",
       [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 1, 1, 0, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 3, 4}, r), randn64({2, 2, 3, 3}, r),
                                    randn64({2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> conv_transpose2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::conv_transpose2d(f32({3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone);
          },
          {"(3, 4, 4)"}),
      err("weight in-channels differ from the input's",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({2, 5, 3, 3}, d), kNone);
          },
          {"(2, 5, 3, 3)", "(1, 3, 4, 4)"}),
      err("int64 input",
          [](D d) {
            return F::conv_transpose2d(i64({1, 3, 4, 4}, d), i64({3, 5, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("float64 weight with a float32 input",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f64({3, 5, 3, 3}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("bias of the wrong size",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(5,)"}),
      err("stride 0",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("padding -1",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 1, -1);
          },
          {"padding -1"}),
      err("output_padding not smaller than stride",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 2, 0, 2);
          },
          {"output_padding 2", "stride 2"}),
      err("padding that leaves no output",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 1, 1}, d), f32({3, 5, 1, 1}, d), kNone, 1, 1);
          },
          {"padding 1", "(1, 3, 1, 1)"}),
      err("input with 0 channels",
          [](D d) {
            return F::conv_transpose2d(f32({1, 0, 4, 4}, d), f32({0, 5, 3, 3}, d), kNone);
          },
          {"(1, 0, 4, 4)"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::conv_transpose2d(f32({0, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), f32({5}, d));
         },
         {0, 5, 6, 6}),
      err("undefined input",
          [](D d) {
            return F::conv_transpose2d(kNone, f32({3, 5, 3, 3}, d), kNone);
          },
          {"undefined"}),
      err("undefined weight",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), kNone, kNone);
          },
          {"undefined"}),
  };
}

// (was CudaParity.Conv2d in tests/ops/test_cuda.cpp)
void conv2d_kernel_parity() {
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
    ops::Act act;
  };
  using A = ops::Act;
  std::vector<Case> cases = {
      {{4, 3, 32, 32}, {6, 3, 5, 5}, {1, 1, 0, 0}, true, A::kRelu},  // LeNet conv1 (fused)
      {{4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1, 0, 0}, true, A::kNone},
      {{2, 5, 9, 9}, {7, 5, 3, 3}, {2, 2, 1, 1}, false, A::kNone},
      {{3, 4, 8, 8}, {8, 4, 3, 3}, {1, 1, 1, 1}, true, A::kRelu},
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kRelu},
      {{2, 3, 11, 6}, {17, 3, 7, 7}, {1, 1, 3, 3}, true, A::kNone},
      {{2, 8, 13, 12}, {16, 8, 3, 3}, {1, 1, 2, 2, 2, 2}, false, A::kRelu},  // dilated (DeepLab)
      {{1, 4, 17, 17}, {8, 4, 3, 3}, {2, 2, 3, 3, 3, 3}, true, A::kNone},    // dilated, strided
      {{2, 16, 9, 9}, {32, 16, 3, 3}, {2, 2, 1, 1}, true, A::kSilu},         // YOLO's folded Conv
      {{2, 5, 7, 9}, {9, 5, 1, 1}, {1, 1, 0, 0}, false, A::kSilu},
  };
  Rng rng(11);
  for (DType t : kFloatTypes)
    for (auto& c : cases) {
      Tensor x = randn(c.x, rng, t), w = randn(c.w, rng, t);
      Tensor b = c.bias ? randn({c.w[0]}, rng, t) : Tensor();
      Shape ys = {c.x[0], c.w[0],
                  ops::conv_out_size(c.x[2], c.w[2], c.p.stride_h, c.p.pad_h, c.p.dil_h),
                  ops::conv_out_size(c.x[3], c.w[3], c.p.stride_w, c.p.pad_w, c.p.dil_w)};
      Tensor dy = randn(ys, rng, t);
      std::string tag = std::string("conv2d ") + dtype_name(t) + " " + shape_str(c.x) + " " +
                        shape_str(c.w) + " act " + std::to_string(static_cast<int>(c.act));
      Tensor y = nan_cpu(ys, t), dx = nan_cpu(c.x, t), dw = nan_cpu(c.w, t);
      Tensor db = c.bias ? nan_cpu({c.w[0]}, t) : Tensor();
      ops::conv2d_forward(x, w, b, y, c.p, c.act);
      ops::conv2d_backward_data(dy, w, dx, c.p);
      ops::conv2d_backward_weights(x, dy, dw, db, c.p);
      Tensor gy = nan_gpu(ys, t), gdx = nan_gpu(c.x, t), gdw = nan_gpu(c.w, t);
      Tensor gdb = c.bias ? nan_gpu({c.w[0]}, t) : Tensor();
      ops::conv2d_forward(gpu(x), gpu(w), gpu(b), gy, c.p, c.act);
      ops::conv2d_backward_data(gpu(dy), gpu(w), gdx, c.p);
      ops::conv2d_backward_weights(gpu(x), gpu(dy), gdw, gdb, c.p);
      expect_close(gy, y, tol_for(t), tag + " y");
      expect_close(gdx, dx, tol_for(t), tag + " dx");
      expect_close(gdw, dw, tol_for(t), tag + " dw");
      if (c.bias) expect_close(gdb, db, tol_for(t), tag + " db");
    }
}

// ConvTranspose's round trips: a batch of 2 (the exported (1, 6, H, W) image folded into
// (2, 3, H, W)), odd and non-square sizes, output_padding below the stride or the dilation.
std::vector<ops::OnnxCase> conv_transpose2d_onnx() {
  return {
      {"(2, 3, 5, 7) stride 2 pad 1 output_padding 1 with bias",
       [](const Tensor& x, auto& p) {
         return F::conv_transpose2d(F::reshape(x, {2, 3, 5, 7}), p[0], p[1], 2, 1, 1);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn({3, 4, 3, 3}, r), randn({4}, r)};
       },
       {{"ConvTranspose", 1}, {"Reshape", 1}},
       6,
       5,
       7},
      {"(1, 3, 4, 5) kernel 2x3 stride 3 pad 1 output_padding 2 dilation 2, no bias",
       [](const Tensor& x, auto& p) { return F::conv_transpose2d(x, p[0], Tensor(), 3, 1, 2, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn({3, 2, 2, 3}, r)};
       },
       {{"ConvTranspose", 1}},
       3,
       4,
       5},
      {"(1, 2, 3, 3) stride 2 pad 2 output_padding 1 dilation 2, with bias",
       [](const Tensor& x, auto& p) { return F::conv_transpose2d(x, p[0], p[1], 2, 2, 1, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn({2, 5, 3, 3}, r), randn({5}, r)};
       },
       {{"ConvTranspose", 1}},
       2,
       3,
       3}};
}

}  // namespace

ops::OpCases op_cases::conv2d() {
  return {
      .samples = conv2d_samples(),
      .errors = conv2d_errors(),
      .goldens = {{"conv2d_s1p1",
                   {"x", "w", "b"},
                   [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); }},
                  {"conv2d_s2p0",
                   {"x", "w", "b"},
                   [](auto& v) { return F::conv2d(v[0], v[1], v[2], 2, 0); }},
                  {"conv2d_dilated",
                   {"x", "w", "b"},
                   [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 2, 2); }}},
      .checks = {{"CudaParity", "the kernels, outputs pre-filled with NaN", conv2d_kernel_parity},
                 {"Bf16", "forward and backward in bfloat16 within 2e-2 of float32",
                  test_util::conv2d_runs_in_bfloat16},
                 {"CudaBf16", "cuDNN's bfloat16 convolutions within 1e-2 of float64, as the CPU's",
                  test_util::conv2d_cuda_runs_in_bfloat16}},
      .onnx = {{"conv2d 3x3 pad 1 with bias",
                [](const Tensor& x, auto& p) { return F::conv2d(x, p[0], p[1], 1, 1); },
                [](Rng& r) {
                  return std::vector<Tensor>{randn64({4, 3, 3, 3}, r, 0.5).to(DType::kFloat32),
                                             randn64({4}, r).to(DType::kFloat32)};
                },
                {{"Conv", 1}}},
               {"conv2d_relu 3x3 stride 2 dilation 2, no bias",
                [](const Tensor& x, auto& p) { return F::conv2d_relu(x, p[0], Tensor(), 2, 2, 2); },
                [](Rng& r) {
                  return std::vector<Tensor>{randn64({2, 3, 3, 3}, r, 0.5).to(DType::kFloat32)};
                },
                {{"Conv", 1}, {"Relu", 1}},
                3,
                9,
                9}}};
}

ops::OpCases op_cases::conv_transpose2d() {
  return {.samples = conv_transpose2d_samples(),
          .errors = conv_transpose2d_errors(),
          .goldens = {{op_name::conv_transpose2d,
                       {"x", "w", "b"},
                       [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 1, 1); }}},
          .onnx = conv_transpose2d_onnx(),
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
