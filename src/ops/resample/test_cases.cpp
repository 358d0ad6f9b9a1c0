// The test cases of global_avg_pool2d, subsample_pad, dropout, upsample_nearest2d and
// upsample_bilinear2d (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as Ops/<op>.*):
// samples for the finite-difference and CUDA parity checks, error inputs, PyTorch goldens, ONNX
// round trips and kernel-level CUDA parity checks (outputs pre-filled with NaN). Compiled into the
// test binary only.
#include <cmath>
#include <functional>
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

std::vector<ops::SampleCase> global_avg_pool2d_samples() {
  return {
      {op_name::global_avg_pool2d, [](auto& v) { return F::global_avg_pool2d(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 3, 4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> global_avg_pool2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::global_avg_pool2d(f32({3, 4, 4}, d));
          },
          {"(3, 4, 4)"}),
      err("int64 input",
          [](D d) {
            return F::global_avg_pool2d(i64({1, 3, 4, 4}, d));
          },
          {"int64"}),
      err("height 0 (as torch)",
          [](D d) {
            return F::global_avg_pool2d(f32({1, 3, 0, 4}, d));
          },
          {"(1, 3, 0, 4)"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::global_avg_pool2d(f32({0, 3, 4, 4}, d));
         },
         {0, 3}),
      err("undefined input", [](D) { return F::global_avg_pool2d(kNone); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> subsample_pad_samples() {
  return {
      {"subsample_pad stride 2 pad 2 odd size",
       [](auto& v) { return F::subsample_pad(v[0], 2, 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 5, 4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"subsample_pad stride 1 pad 1", [](auto& v) { return F::subsample_pad(v[0], 1, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> subsample_pad_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::subsample_pad(f32({3, 4, 4}, d), 2, 1);
          },
          {"(3, 4, 4)"}),
      err("stride 0",
          [](D d) {
            return F::subsample_pad(f32({1, 3, 4, 4}, d), 0, 1);
          },
          {"stride 0"}),
      err("pad -1",
          [](D d) {
            return F::subsample_pad(f32({1, 3, 4, 4}, d), 2, -1);
          },
          {"pad -1"}),
      err("int64 input",
          [](D d) {
            return F::subsample_pad(i64({1, 3, 4, 4}, d), 2, 1);
          },
          {"int64"}),
      ok("batch of 0 (an empty output)",
         [](D d) {
           return F::subsample_pad(f32({0, 3, 4, 4}, d), 2, 1);
         },
         {0, 5, 2, 2}),
      err("undefined input", [](D) { return F::subsample_pad(kNone, 2, 1); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> dropout_samples() {
  return {
      {"dropout p 0.3 (fixed mask)",
       [](auto& v) {
         manual_seed(11);  // the same mask on every evaluation
         return F::dropout(v[0], 0.3, true);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 6}, r)};
       }},
  };
}

std::vector<ops::ErrorCase> dropout_errors() {
  return {
      err("p -0.1",
          [](D d) {
            return F::dropout(f32({2, 3}, d), -0.1);
          },
          {"-0.1"}),
      err("p 1.5",
          [](D d) {
            return F::dropout(f32({2, 3}, d), 1.5);
          },
          {"1.5"}),
      err("p NaN",
          [](D d) {
            return F::dropout(f32({2, 3}, d), NAN);
          },
          {"nan"}),
      err("int64 input",
          [](D d) {
            return F::dropout(i64({2, 3}, d), 0.5);
          },
          {"int64"}),
      ok("empty input (torch: an empty output)",
         [](D d) {
           return F::dropout(f32({0, 3}, d), 0.5);
         },
         {0, 3}),
      err("undefined input", [](D) { return F::dropout(kNone, 0.5); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> upsample_nearest2d_samples() {
  return {
      {"upsample_nearest2d scale 2", [](auto& v) { return F::upsample_nearest2d(v[0], 2); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 3, 4}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"upsample_nearest2d scale 3 then conv",
       [](auto& v) { return F::conv2d(F::upsample_nearest2d(v[0], 3), v[1], Tensor(), 1, 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 2, 3}, r), randn64({2, 2, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"upsample_nearest2d scale 1", [](auto& v) { return F::upsample_nearest2d(v[0], 1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 3, 2}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> upsample_nearest2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::upsample_nearest2d(f32({3, 4, 4}, d), 2);
          },
          {"(3, 4, 4)"}),
      err("scale 0",
          [](D d) {
            return F::upsample_nearest2d(f32({1, 3, 4, 4}, d), 0);
          },
          {"scale", "got 0", "(1, 3, 4, 4)"}),
      err("scale -2",
          [](D d) {
            return F::upsample_nearest2d(f32({1, 3, 4, 4}, d), -2);
          },
          {"got -2"}),
      err("int64 input",
          [](D d) {
            return F::upsample_nearest2d(i64({1, 3, 4, 4}, d), 2);
          },
          {"int64"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::upsample_nearest2d(f32({0, 3, 4, 4}, d), 2);
         },
         {0, 3, 8, 8}),
      err("undefined input", [](D) { return F::upsample_nearest2d(kNone, 2); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> upsample_bilinear2d_samples() {
  std::vector<ops::SampleCase> s;
  for (bool align : {false, true}) {
    const std::string a = align ? " align_corners" : "";
    s.push_back({"upsample_bilinear2d 3x4 -> 7x9" + a,
                 [align](auto& v) { return F::upsample_bilinear2d(v[0], 7, 9, align); },
                 [](Rng& r) {
                   return std::vector<Tensor>{randn64({2, 2, 3, 4}, r)};
                 },
                 ops::kCheckGrad | ops::kCheckCudaParity});
    s.push_back({"upsample_bilinear2d down 6x5 -> 4x2" + a,
                 [align](auto& v) { return F::upsample_bilinear2d(v[0], 4, 2, align); },
                 [](Rng& r) {
                   return std::vector<Tensor>{randn64({1, 2, 6, 5}, r)};
                 },
                 ops::kCheckGrad | ops::kCheckCudaParity});
    s.push_back({"upsample_bilinear2d 1x1 -> 3x2 and 4x1 -> 1x3" + a,
                 [align](auto& v) {
                   return F::cat({F::reshape(F::upsample_bilinear2d(v[0], 3, 2, align), {1, 1, 6}),
                                  F::reshape(F::upsample_bilinear2d(v[1], 1, 3, align), {1, 1, 3})},
                                 2);
                 },
                 [](Rng& r) {
                   return std::vector<Tensor>{randn64({1, 1, 1, 1}, r), randn64({1, 1, 4, 1}, r)};
                 },
                 ops::kCheckGrad | ops::kCheckCudaParity});
  }
  return s;
}

std::vector<ops::ErrorCase> upsample_bilinear2d_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::upsample_bilinear2d(f32({3, 4, 4}, d), 8, 8);
          },
          {"(3, 4, 4)"}),
      err("output height 0",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 4, 4}, d), 0, 8);
          },
          {"0x8"}),
      err("output width -1",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 4, 4}, d), 8, -1);
          },
          {"8x-1"}),
      err("input height 0",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 0, 4}, d), 8, 8);
          },
          {"(1, 3, 0, 4)"}),
      err("int64 input",
          [](D d) {
            return F::upsample_bilinear2d(i64({1, 3, 4, 4}, d), 8, 8);
          },
          {"int64"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::upsample_bilinear2d(f32({0, 3, 4, 4}, d), 8, 8);
         },
         {0, 3, 8, 8}),
      err("undefined input", [](D) { return F::upsample_bilinear2d(kNone, 8, 8); }, {"undefined"}),
  };
}

// Global average pooling, the shortcut's subsample-and-pad and dropout's mask over (3, 4, 5, 7)
// (was CudaParity.PoolingShortcutDropoutAndOptimizerExtras in tests/ops/test_cuda.cpp; the
// optimizer kernels stayed there).
void for_each_pool_input(const std::function<void(DType, const Tensor&, Rng&)>& f) {
  Rng rng(22);
  for (DType t : kFloatTypes) f(t, randn({3, 4, 5, 7}, rng, t), rng);
}

void global_avg_pool2d_kernel_parity() {
  for_each_pool_input([](DType t, const Tensor& x, Rng&) {
    std::string tag = dtype_name(t);
    Tensor y = nan_cpu({3, 4}, t), gy = nan_gpu({3, 4}, t);
    ops::global_avg_pool2d_forward(x, y);
    ops::global_avg_pool2d_forward(gpu(x), gy);
    expect_close(gy, y, tol_for(t), "global_avg_pool2d " + tag);
    Tensor dx = nan_cpu(x.shape(), t), gdx = nan_gpu(x.shape(), t);
    ops::global_avg_pool2d_backward(y, dx);
    ops::global_avg_pool2d_backward(gpu(y), gdx);
    expect_close(gdx, dx, tol_for(t), "global_avg_pool2d_backward " + tag);
  });
}

void subsample_pad_kernel_parity() {
  for_each_pool_input([](DType t, const Tensor& x, Rng&) {
    std::string tag = dtype_name(t);
    Tensor sp = nan_cpu({3, 8, 3, 4}, t), gsp = nan_gpu({3, 8, 3, 4}, t);
    ops::subsample_pad_forward(x, sp, 2, 2);
    ops::subsample_pad_forward(gpu(x), gsp, 2, 2);
    expect_close(gsp, sp, 0, "subsample_pad " + tag);
    Tensor sdx = nan_cpu(x.shape(), t), gsdx = nan_gpu(x.shape(), t);
    ops::subsample_pad_backward(sp, sdx, 2, 2);
    ops::subsample_pad_backward(gpu(sp), gsdx, 2, 2);
    expect_close(gsdx, sdx, 0, "subsample_pad_backward " + tag);
  });
}

void dropout_kernel_parity() {
  for_each_pool_input([](DType t, const Tensor& x, Rng& rng) {
    std::string tag = dtype_name(t);
    Tensor mask = Tensor::empty(x.shape(), DType::kUInt8);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = rng.uniform() < 0.7;
    Tensor m = nan_cpu(x.shape(), t), gm = nan_gpu(x.shape(), t);
    ops::mask_scale(x, mask, 1 / 0.7, m);
    ops::mask_scale(gpu(x), gpu(mask), 1 / 0.7, gm);
    expect_close(gm, m, tol_for(t), "dropout mask_scale " + tag);
  });
}

// (was CudaParity.UpsampleNearest2d in tests/ops/test_cuda.cpp)
void upsample_nearest2d_kernel_parity() {
  Rng rng(23);
  for (DType t : kFloatTypes)
    for (int64_t s : {int64_t{1}, int64_t{2}, int64_t{3}})
      for (const Shape& xs : {Shape{2, 3, 5, 7}, Shape{1, 16, 33, 20}}) {
        std::string tag = std::string("upsample_nearest2d ") + dtype_name(t) + " " + shape_str(xs) +
                          " scale " + std::to_string(s);
        Shape ys = {xs[0], xs[1], xs[2] * s, xs[3] * s};
        Tensor x = randn(xs, rng, t), dy = randn(ys, rng, t);
        Tensor y = nan_cpu(ys, t), gy = nan_gpu(ys, t);
        ops::upsample_nearest2d_forward(x, y, s);
        ops::upsample_nearest2d_forward(gpu(x), gy, s);
        expect_close(gy, y, 0, tag + " y");
        Tensor dx = nan_cpu(xs, t), gdx = nan_gpu(xs, t);
        ops::upsample_nearest2d_backward(dy, dx, s);
        ops::upsample_nearest2d_backward(gpu(dy), gdx, s);
        expect_close(gdx, dx, tol_for(t), tag + " dx");
      }
}

// (was CudaParity.UpsampleBilinear2dBothAlignments in tests/ops/test_cuda.cpp)
void upsample_bilinear2d_kernel_parity() {
  Rng rng(27);
  struct Case {
    Shape x;
    int64_t oh, ow;
  };
  for (DType t : kFloatTypes)
    for (bool align : {false, true})
      for (const Case& c : {Case{{2, 3, 5, 7}, 11, 9}, Case{{1, 16, 16, 16}, 128, 128},
                            Case{{2, 2, 9, 8}, 4, 3}, Case{{2, 4, 1, 1}, 6, 5}}) {
        std::string tag = std::string("upsample_bilinear2d ") + dtype_name(t) + " " +
                          shape_str(c.x) + " -> " + std::to_string(c.oh) + "x" +
                          std::to_string(c.ow) + (align ? " align_corners" : "");
        Shape ys = {c.x[0], c.x[1], c.oh, c.ow};
        Tensor x = randn(c.x, rng, t), dy = randn(ys, rng, t);
        Tensor y = nan_cpu(ys, t), gy = nan_gpu(ys, t);
        ops::upsample_bilinear2d_forward(x, y, align);
        ops::upsample_bilinear2d_forward(gpu(x), gy, align);
        expect_close(gy, y, tol_for(t), tag + " y");
        Tensor dx = nan_cpu(c.x, t), gdx = nan_gpu(c.x, t);
        ops::upsample_bilinear2d_backward(dy, dx, align);
        ops::upsample_bilinear2d_backward(gpu(dy), gdx, align);
        expect_close(gdx, dx, tol_for(t), tag + " dx");
      }
}

// The round trips of global_avg_pool2d, subsample_pad and upsample_bilinear2d: batches of 2
// (the exported (1, 6, H, W) image folded into (2, 3, H, W)), odd and non-square sizes.
std::vector<ops::OnnxCase> global_avg_pool2d_onnx() {
  return {{"(2, 3, 7, 5) -> (2, 3)",
           [](const Tensor& x, auto&) {
             return F::global_avg_pool2d(F::reshape(x, {2, 3, 7, 5}));
           },
           nullptr,
           {{"GlobalAveragePool", 1}, {"Flatten", 1}},
           6,
           7,
           5},
          {"ResNet's head: linear(global_avg_pool2d(x))",
           [](const Tensor& x, auto& p) { return F::linear(F::global_avg_pool2d(x), p[0], p[1]); },
           [](Rng& r) {
             return std::vector<Tensor>{randn({4, 3}, r), randn({4}, r)};
           },
           {{"GlobalAveragePool", 1}, {"Flatten", 1}, {"Gemm", 1}}}};
}

std::vector<ops::OnnxCase> subsample_pad_onnx() {
  return {{"(2, 3, 7, 5) stride 2 pad 2 -> (2, 7, 4, 3)",
           [](const Tensor& x, auto&) {
             return F::subsample_pad(F::reshape(x, {2, 3, 7, 5}), 2, 2);
           },
           nullptr,
           {{"Slice", 1}, {"Pad", 1}},
           6,
           7,
           5},
          {"(1, 3, 8, 4) stride 3 pad 1 -> (1, 5, 3, 2)",
           [](const Tensor& x, auto&) { return F::subsample_pad(x, 3, 1); },
           nullptr,
           {{"Slice", 1}, {"Pad", 1}},
           3,
           8,
           4}};
}

// (label, out_h, out_w, align_corners) on (2, 3, 5, 4); an output length of 1 is where ONNX's
// pytorch_half_pixel and torch's half-pixel centres part (the mapping writes half_pixel there).
std::vector<ops::OnnxCase> upsample_bilinear2d_onnx() {
  struct Size {
    const char* label;
    int64_t h, w;
    bool align;
  };
  const Size sizes[] = {{"(2, 3, 5, 4) up to 9x7", 9, 7, false},
                        {"(2, 3, 5, 4) up to 9x7, align_corners", 9, 7, true},
                        {"(2, 3, 5, 4) down to 3x3", 3, 3, false},
                        {"(2, 3, 5, 4) down to 2x3, align_corners", 2, 3, true},
                        {"(2, 3, 5, 4) to 1x6", 1, 6, false},
                        {"(2, 3, 5, 4) to 7x1", 7, 1, false},
                        {"(2, 3, 5, 4) to 7x1, align_corners", 7, 1, true}};
  std::vector<ops::OnnxCase> out;
  for (const Size& s : sizes)
    out.push_back({s.label,
                   [s](const Tensor& x, auto&) {
                     return F::upsample_bilinear2d(F::reshape(x, {2, 3, 5, 4}), s.h, s.w, s.align);
                   },
                   nullptr,
                   {{"Resize", 1}, {"Shape", 1}, {"Concat", 1}},
                   6,
                   5,
                   4});
  return out;
}

}  // namespace

ops::OpCases op_cases::global_avg_pool2d() {
  return {.samples = global_avg_pool2d_samples(),
          .errors = global_avg_pool2d_errors(),
          .goldens = {{"gap",
                       {"x"},
                       [](auto& v) { return F::global_avg_pool2d(v[0]); },
                       {},
                       "resnet_golden.safetensors"}},
          .onnx = global_avg_pool2d_onnx(),
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::subsample_pad() {
  return {.samples = subsample_pad_samples(),
          .errors = subsample_pad_errors(),
          .goldens = {{"shortcut_a",
                       {"x"},
                       [](auto& v) { return F::subsample_pad(v[0], 2, 2); },
                       {},
                       "resnet_golden.safetensors"},
                      {"shortcut_a_odd",
                       {"x"},
                       [](auto& v) { return F::subsample_pad(v[0], 2, 2); },
                       {},
                       "resnet_golden.safetensors"}},
          .checks = {{"CudaParity", "the kernels", subsample_pad_kernel_parity}},
          .onnx = subsample_pad_onnx(),
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::dropout() {
  return {.samples = dropout_samples(),
          .errors = dropout_errors(),
          .checks = {{"CudaParity", "the mask kernel", dropout_kernel_parity}},
          .onnx = {{"dropout in eval: nothing in the graph",
                    [](const Tensor& x, auto&) { return F::relu(F::dropout(x, 0.3, false)); },
                    nullptr,
                    {{"Relu", 1}}}},
          .no_bf16 = kNoBf16,
          .no_golden =
              "PyTorch cannot give its numbers: the mask comes from hpcnet's "
              "default_rng(), not torch's generator (the sample checks the gradient "
              "under a fixed mask; tests/nn/test_dropout.cpp the rate, the 1 / (1 - p) "
              "scale and the identity cases)"};
}

ops::OpCases op_cases::upsample_nearest2d() {
  return {.samples = upsample_nearest2d_samples(),
          .errors = upsample_nearest2d_errors(),
          .goldens = {{"upsample_nearest2d_s2",
                       {"x"},
                       [](auto& v) { return F::upsample_nearest2d(v[0], 2); }},
                      {"upsample_nearest2d_s3",
                       {"x"},
                       [](auto& v) { return F::upsample_nearest2d(v[0], 3); }}},
          .onnx = {{"upsample_nearest2d scale 2",
                    [](const Tensor& x, auto&) { return F::upsample_nearest2d(x, 2); },
                    nullptr,
                    {{"Resize", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::upsample_bilinear2d() {
  return {.samples = upsample_bilinear2d_samples(),
          .errors = upsample_bilinear2d_errors(),
          .goldens = {{op_name::upsample_bilinear2d,
                       {"x"},
                       [](auto& v) { return F::upsample_bilinear2d(v[0], 9, 7, false); }},
                      {"upsample_bilinear2d_ac",
                       {"x"},
                       [](auto& v) { return F::upsample_bilinear2d(v[0], 9, 7, true); }},
                      {"upsample_bilinear2d_down",
                       {"x"},
                       [](auto& v) { return F::upsample_bilinear2d(v[0], 3, 4, false); }}},
          .onnx = upsample_bilinear2d_onnx(),
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
