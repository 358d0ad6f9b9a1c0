// The test cases of cat and narrow (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as
// Ops/<op>.*): samples for the finite-difference and CUDA parity checks, error inputs, PyTorch
// goldens, ONNX round trips and kernel-level CUDA parity checks (outputs pre-filled with NaN).
// Compiled into the test binary only.
#include <gtest/gtest.h>

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
const Device kGpu = gpu_device();

std::vector<ops::SampleCase> cat_samples() {
  return {
      {"cat dim 1 of three (N, C, H, W)",
       [](auto& v) {
         return F::cat({v[0], v[1], v[2]}, 1);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 2, 3}, r), randn64({2, 1, 2, 3}, r),
                                    randn64({2, 2, 2, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"cat dim 0 of 2-d, one input twice",
       [](auto& v) {
         return F::cat({v[0], v[1], v[0]}, 0);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3}, r), randn64({1, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"cat dim -1 with a constant between",
       [](auto& v) {
         return F::cat({v[0], Tensor::full({2, 2, 1}, 0.5, DType::kFloat64), v[1]}, -1);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 2, 3}, r), randn64({2, 2, 2}, r)};
       }},
      {"cat upsampled and skip (U-Net decoder)",
       [](auto& v) {
         return F::conv2d(F::cat({F::upsample_nearest2d(v[0], 2), v[1]}, 1), v[2], Tensor(), 1, 1);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({1, 2, 2, 2}, r), randn64({1, 1, 4, 4}, r),
                                    randn64({2, 3, 3, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> cat_errors() {
  return {
      err("no tensors", [](D) { return F::cat({}, 0); }, {"at least one"}),
      err("dim 2 of rank-2 tensors",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3}, d)}, 2);
          },
          {"dim 2", "rank 2"}),
      err("dim -3 of rank-2 tensors",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3}, d)}, -3);
          },
          {"dim -3", "rank 2"}),
      err("ranks differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3, 1}, d)}, 0);
          },
          {"(2, 3, 1)", "(2, 3)"}),
      err("sizes outside dim differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 4}, d)}, 0);
          },
          {"(2, 4)", "(2, 3)"}),
      err("dtypes differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f64({2, 3}, d)}, 0);
          },
          {"float64", "float32"}),
      err("an undefined tensor",
          [](D d) {
            return F::cat({f32({2, 3}, d), kNone}, 0);
          },
          {"tensor 1", "undefined"}),
      err("0-d tensors",
          [](D d) {
            return F::cat({f32({}, d), f32({}, d)}, 0);
          },
          {"zero-dimensional"}),
      ok("an empty tensor beside a full one (torch: the full one)",
         [](D d) {
           return F::cat({f32({0, 3}, d), f32({2, 3}, d)}, 0);
         },
         {2, 3}),
  };
}

std::vector<ops::SampleCase> narrow_samples() {
  return {
      {"narrow of channels, two chunks used twice",
       [](auto& v) {
         Tensor a = F::narrow(v[0], 1, 0, 2), b = F::narrow(v[0], 1, 2, 3);
         return F::cat({F::reshape(F::mul(a, a), {-1}), F::reshape(b, {-1}),
                        F::reshape(F::narrow(v[0], -1, 1, 2), {-1})},
                       0);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 5, 3}, r)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"narrow of (2, 10, 6), dim 1 from 3 for 5", [](auto& v) { return F::narrow(v[0], 1, 3, 5); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 10, 6}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> narrow_errors() {
  return {
      err("slice past the end",
          [](D d) {
            return F::narrow(f32({2, 6, 4}, d), 1, 4, 3);
          },
          {"start 4", "length 3", "(2, 6, 4)"}),
      err("negative start",
          [](D d) {
            return F::narrow(f32({2, 6}, d), 1, -1, 2);
          },
          {"start -1"}),
      err("dim out of range",
          [](D d) {
            return F::narrow(f32({2, 6}, d), 2, 0, 1);
          },
          {"dim 2", "(2, 6)"}),
      err("0-d input", [](D d) { return F::narrow(f32({}, d), 0, 0, 1); }, {"zero-dimensional"}),
      ok("length 0 (torch: an empty slice)",
         [](D d) {
           return F::narrow(f32({2, 6, 4}, d), -2, 6, 0);
         },
         {2, 0, 4}),
  };
}

// (was CudaParity.CatAlongEveryDim in tests/ops/test_cuda.cpp)
void cat_kernel_parity() {
  Rng rng(24);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64})
    for (int64_t dim = 0; dim < 4; ++dim) {
      std::string tag = std::string("cat ") + dtype_name(t) + " dim " + std::to_string(dim);
      std::vector<Tensor> xs, gxs;
      std::vector<int64_t> sizes;
      Shape ys = {3, 4, 5, 6};
      ys[dim] = 0;
      for (int64_t d : {2, 1, 3}) {
        Shape s = {3, 4, 5, 6};
        s[dim] = d;
        ys[dim] += d;
        sizes.push_back(d);
        xs.push_back(randn(s, rng, DType::kFloat64).to(t));
        gxs.push_back(gpu(xs.back()));
      }
      Tensor y = Tensor::full(ys, -7, t), gy = Tensor::full(ys, -7, t, kGpu);
      ops::cat_forward(xs, y, dim);
      ops::cat_forward(gxs, gy, dim);
      expect_equal_ints(gy, y, tag + " y");
      Tensor dy = randn(ys, rng, DType::kFloat64).to(t);
      std::vector<Tensor> dxs(3), gdxs(3);
      for (int i : {0, 2}) {  // the middle input needs no gradient
        dxs[i] = Tensor::full(xs[i].shape(), -7, t);
        gdxs[i] = Tensor::full(xs[i].shape(), -7, t, kGpu);
      }
      ops::cat_backward(dy, sizes, dxs, dim);
      ops::cat_backward(gpu(dy), sizes, gdxs, dim);
      EXPECT_FALSE(gdxs[1].defined()) << tag;
      for (int i : {0, 2}) expect_equal_ints(gdxs[i], dxs[i], tag + " dx" + std::to_string(i));
    }
}

}  // namespace

ops::OpCases op_cases::cat() {
  return {.samples = cat_samples(),
          .errors = cat_errors(),
          .goldens = {{"cat_dim1",
                       {"a", "b", "c"},
                       [](auto& v) {
                         return F::cat({v[0], v[1], v[2]}, 1);
                       }},
                      {"cat_dim_last",
                       {"a", "b"},
                       [](auto& v) {
                         return F::cat({v[0], v[1]}, -1);
                       }}},
          .checks = {{"CudaParity", "the kernels along every dim, int64 too", cat_kernel_parity}},
          .onnx = {{"cat of x and relu(x) on channels",
                    [](const Tensor& x, auto&) {
                      return F::cat({x, F::relu(x)}, 1);
                    },
                    nullptr,
                    {{"Concat", 1}}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::narrow() {
  return {.samples = narrow_samples(),
          .errors = narrow_errors(),
          .goldens = {{"narrow_dim1_end", {"x"}, [](auto& v) { return F::narrow(v[0], 1, 3, 2); }},
                      {"narrow_dim1_one_image",  // a view of x's memory
                       {"x"},
                       [](auto& v) { return F::narrow(v[0], 1, 3, 2); }},
                      {"narrow_dim0_end", {"x"}, [](auto& v) { return F::narrow(v[0], 0, 3, 2); }},
                      {"narrow_last", {"x"}, [](auto& v) { return F::narrow(v[0], -1, 4, 3); }}},
          .onnx = {{"narrow of channels 1 to 2",
                    [](const Tensor& x, auto&) { return F::narrow(x, 1, 1, 2); },
                    nullptr,
                    {{"Slice", 1}}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
