// The test cases of log_softmax, nll_loss, cross_entropy, cross_entropy2d, dice_loss and argmax
// (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as Ops/<op>.*): samples for the
// finite-difference and CUDA parity checks, error inputs, PyTorch goldens and kernel-level CUDA
// parity checks (outputs pre-filled with NaN). Compiled into the test binary only.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"

namespace hpcnet {
namespace {

using namespace ops::cases;
using namespace ops::case_checks;
using D = Device;
const Device kGpu = gpu_device();

std::vector<ops::SampleCase> log_softmax_samples() {
  return {
      {op_name::log_softmax, [](auto& v) { return F::log_softmax(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 5}, r, 3.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> log_softmax_errors() {
  return {
      err("input of rank 1", [](D d) { return F::log_softmax(f32({3}, d)); }, {"(3,)"}),
      err("input of rank 3",
          [](D d) {
            return F::log_softmax(f32({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("int64 input",
          [](D d) {
            return F::log_softmax(i64({2, 3}, d));
          },
          {"int64"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::log_softmax(f32({0, 3}, d));
         },
         {0, 3}),
      ok("0 classes (torch: an empty output)",
         [](D d) {
           return F::log_softmax(f32({2, 0}, d));
         },
         {2, 0}),
      err("undefined input", [](D) { return F::log_softmax(kNone); }, {"undefined"}),
  };
}

std::vector<ops::SampleCase> nll_loss_samples() {
  return {
      {"nll_loss of log_softmax", [](auto& v) { return F::nll_loss(F::log_softmax(v[0]), v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 5}, r), Tensor::from_labels({0, 4, 2, 2})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> nll_loss_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::nll_loss(f32({2, 3, 4}, d), i64({2}, d));
          },
          {"(2, 3, 4)"}),
      err("target of another length",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), i64({3}, d));
          },
          {"target", "(3,)", "(2,)"}),
      err("float32 target",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), f32({2}, d));
          },
          {"target", "float32", "int64"}),
      err("int64 input",
          [](D d) {
            return F::nll_loss(i64({2, 3}, d), i64({2}, d));
          },
          {"int64"}),
      err_label("label out of range",
                [](D d) {
                  return F::nll_loss(f32({2, 3}, d), labels_with({2}, 1, 5, d));
                },
                {"label 5", "[0, 3)"}),
      err("batch of 0 (hpcnet: an error; torch: NaN)",
          [](D d) {
            return F::nll_loss(f32({0, 3}, d), i64({0}, d));
          },
          {"empty", "(0, 3)"}),
      err("undefined input", [](D d) { return F::nll_loss(kNone, i64({2}, d)); }, {"undefined"}),
      err("undefined target",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), kNone);
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> cross_entropy_samples() {
  return {
      {op_name::cross_entropy, [](auto& v) { return F::cross_entropy(v[0], v[1]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 6}, r, 2.0), Tensor::from_labels({5, 0, 3, 3})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"cross_entropy label smoothing 0.1",
       [](auto& v) { return F::cross_entropy(v[0], v[1], 0.1); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 4}, r), Tensor::from_labels({1, 0, 3})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> cross_entropy_errors() {
  return {
      err("input of rank 1", [](D d) { return F::cross_entropy(f32({3}, d), i64({1}, d)); },
          {"(3,)"}),
      err("target of another length",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), i64({3}, d));
          },
          {"target", "(3,)", "(2,)"}),
      err("uint8 target",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), u8({2}, d));
          },
          {"target", "uint8", "int64"}),
      err("int64 input",
          [](D d) {
            return F::cross_entropy(i64({2, 3}, d), i64({2}, d));
          },
          {"int64"}),
      err_label("label out of range",
                [](D d) {
                  return F::cross_entropy(f32({2, 3}, d), labels_with({2}, 0, -1, d));
                },
                {"label -1", "[0, 3)"}),
      err("label_smoothing 1.5",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), i64({2}, d), 1.5);
          },
          {"label_smoothing", "1.5"}),
      err("batch of 0 (hpcnet: an error; torch: NaN)",
          [](D d) {
            return F::cross_entropy(f32({0, 3}, d), i64({0}, d));
          },
          {"empty", "(0, 3)"}),
      err("undefined input", [](D d) { return F::cross_entropy(kNone, i64({2}, d)); },
          {"undefined"}),
      err("undefined target",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), kNone);
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> cross_entropy2d_samples() {
  return {
      {op_name::cross_entropy2d, [](auto& v) { return F::cross_entropy2d(v[0], v[1]); },
       [](Rng& r) {
         Tensor t = Tensor::from_labels({0, 3, 2, 1, 1, 0, 3, 3, 2, 0, 1, 2});
         return std::vector<Tensor>{randn64({2, 4, 2, 3}, r, 2.0), t.view_nograd({2, 2, 3})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"cross_entropy2d with class weights and ignored pixels",
       [](auto& v) {
         Tensor w = Tensor::from_vector_f64({0.5, 2.0, 1.0, 0.25}, {4});  // a constant
         return F::cross_entropy2d(v[0], v[1], w, 255);
       },
       [](Rng& r) {
         Tensor t = Tensor::from_labels({0, 255, 2, 1, 255, 0, 3, 3, 255, 0, 1, 2});
         return std::vector<Tensor>{randn64({2, 4, 3, 2}, r, 2.0), t.view_nograd({2, 3, 2})};
       }},
      {"cross_entropy2d ignore_index is a class",
       [](auto& v) { return F::cross_entropy2d(v[0], v[1], Tensor(), 1); },
       [](Rng& r) {
         Tensor t = Tensor::from_labels({0, 1, 2, 1, 2, 0});
         return std::vector<Tensor>{randn64({1, 3, 2, 3}, r), t.view_nograd({1, 2, 3})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> cross_entropy2d_errors() {
  return {
      err("logits of rank 3",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4}, d), i64({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("target of another size",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 5}, d));
          },
          {"(2, 4, 5)", "(2, 3, 4, 4)"}),
      err("float32 target",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), f32({2, 4, 4}, d));
          },
          {"target", "float32"}),
      err("int64 logits",
          [](D d) {
            return F::cross_entropy2d(i64({2, 3, 4, 4}, d), i64({2, 4, 4}, d));
          },
          {"int64"}),
      err("weight of the wrong size",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f32({2}, d));
          },
          {"weight", "(2,)", "(3,)"}),
      err("float64 weight with float32 logits",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f64({3}, d));
          },
          {"weight", "float64", "float32"}),
      err_label("label out of range",
                [](D d) {
                  return F::cross_entropy2d(f32({2, 3, 4, 4}, d), labels_with({2, 4, 4}, 5, 7, d));
                },
                {"label 7", "[0, 3)"}),
      err("0 classes",
          [](D d) {
            return F::cross_entropy2d(f32({2, 0, 4, 4}, d), i64({2, 4, 4}, d));
          },
          {"(2, 0, 4, 4)"}),
      ok_value(
          "batch of 0 (torch: NaN)",
          [](D d) {
            return F::cross_entropy2d(f32({0, 3, 4, 4}, d), i64({0, 4, 4}, d));
          },
          NAN),
      err("undefined target",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), kNone);
          },
          {"undefined"}),
      err("undefined logits",
          [](D d) {
            return F::cross_entropy2d(kNone, i64({2, 4, 4}, d));
          },
          {"undefined"}),
  };
}

std::vector<ops::SampleCase> dice_loss_samples() {
  return {
      {op_name::dice_loss, [](auto& v) { return F::dice_loss(v[0], v[1]); },
       [](Rng& r) {
         Tensor t = Tensor::from_labels({0, 3, 2, 1, 1, 0, 3, 3, 2, 0, 1, 2});
         return std::vector<Tensor>{randn64({2, 4, 2, 3}, r, 2.0), t.view_nograd({2, 2, 3})};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"dice_loss with class weights, ignored pixels, an absent class and smooth",
       [](auto& v) {
         Tensor w = Tensor::from_vector_f64({0.5, 2.0, 1.0, 0.25}, {4});
         return F::dice_loss(v[0], v[1], w, 255, 1.0);
       },
       [](Rng& r) {
         Tensor t = Tensor::from_labels({0, 255, 2, 0, 255, 0, 2, 2, 255, 0, 1, 2});
         return std::vector<Tensor>{randn64({2, 4, 3, 2}, r, 2.0), t.view_nograd({2, 3, 2})};
       }},
  };
}

std::vector<ops::ErrorCase> dice_loss_errors() {
  return {
      err("logits of rank 2",
          [](D d) {
            return F::dice_loss(f32({2, 3}, d), i64({2}, d));
          },
          {"(2, 3)"}),
      err("target of another size",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4}, d));
          },
          {"(2, 4)", "(2, 3, 4, 4)"}),
      err("uint8 target",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), u8({2, 4, 4}, d));
          },
          {"target", "uint8"}),
      err("weight of the wrong size",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f32({4}, d));
          },
          {"weight", "(4,)", "(3,)"}),
      err("smooth -1",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), kNone, 255, -1.0);
          },
          {"smooth -1"}),
      err("eps 0",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), kNone, 255, 0.0, 0.0);
          },
          {"eps 0"}),
      err_label("label out of range",
                [](D d) {
                  return F::dice_loss(f32({2, 3, 4, 4}, d), labels_with({2, 4, 4}, 3, 3, d));
                },
                {"label 3", "[0, 3)"}),
      ok_value(
          "batch of 0 (smp: 0)",
          [](D d) {
            return F::dice_loss(f32({0, 3, 4, 4}, d), i64({0, 4, 4}, d));
          },
          0.0),
      err("undefined logits",
          [](D d) {
            return F::dice_loss(kNone, i64({2, 4, 4}, d));
          },
          {"undefined"}),
  };
}

std::vector<ops::ErrorCase> argmax_errors() {
  return {
      err("input of rank 1", [](D d) { return F::argmax(f32({3}, d)); }, {"(3,)"}),
      err("input of rank 3",
          [](D d) {
            return F::argmax(f32({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("int64 input",
          [](D d) {
            return F::argmax(i64({2, 3}, d));
          },
          {"int64"}),
      err("0 classes (as torch)",
          [](D d) {
            return F::argmax(f32({2, 0}, d));
          },
          {"(2, 0)"}),
      ok("batch of 0 (torch: an empty output)",
         [](D d) {
           return F::argmax(f32({0, 3}, d));
         },
         {0}),
      err("undefined input", [](D) { return F::argmax(kNone); }, {"undefined"}),
  };
}

// The softmax family and argmax over (n, 10), n = 1, 4, 513 (was CudaParity.SoftmaxFamilyAndArgmax
// in tests/ops/test_cuda.cpp, one check per op now).
void for_each_softmax_input(const std::function<void(DType, int64_t, const Tensor&, const Tensor&,
                                                     const Tensor&, const std::string&)>& f) {
  Rng rng(15);
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{513}}) {
      const int64_t c = 10;
      std::string tag = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      Tensor x = randn({n, c}, rng, t), dy = randn({n, c}, rng, t);
      std::vector<int64_t> labels(n);
      for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int64_t>(rng.randint(c));
      f(t, n, x, dy, Tensor::from_labels(labels), tag);
    }
}

void log_softmax_kernel_parity() {
  for_each_softmax_input([](DType t, int64_t n, const Tensor& x, const Tensor& dy, const Tensor&,
                            const std::string& tag) {
    Tensor ls = nan_cpu({n, 10}, t), gls = nan_gpu({n, 10}, t);
    ops::log_softmax_forward(x, ls);
    ops::log_softmax_forward(gpu(x), gls);
    expect_close(gls, ls, tol_for(t), "log_softmax " + tag);
    Tensor dls = nan_cpu({n, 10}, t), gdls = nan_gpu({n, 10}, t);
    ops::log_softmax_backward(dy, ls, dls);
    ops::log_softmax_backward(gpu(dy), gls, gdls);
    expect_close(gdls, dls, tol_for(t), "log_softmax_backward " + tag);
  });
}

void nll_loss_kernel_parity() {
  for_each_softmax_input([](DType t, int64_t n, const Tensor& x, const Tensor&, const Tensor& tgt,
                            const std::string& tag) {
    Tensor ls = nan_cpu({n, 10}, t), gls = nan_gpu({n, 10}, t), gtgt = gpu(tgt);
    ops::log_softmax_forward(x, ls);
    ops::log_softmax_forward(gpu(x), gls);
    Tensor nl = nan_cpu({}, t), gnl = nan_gpu({}, t);
    ops::nll_loss_forward(ls, tgt, nl);
    ops::nll_loss_forward(gls, gtgt, gnl);
    expect_close(gnl, nl, tol_for(t), "nll_loss " + tag);
    Tensor dl = Tensor::full({}, 1.7, t);
    Tensor dnl = nan_cpu({n, 10}, t), gdnl = nan_gpu({n, 10}, t);
    ops::nll_loss_backward(dl, tgt, dnl);
    ops::nll_loss_backward(gpu(dl), gtgt, gdnl);
    expect_close(gdnl, dnl, 0, "nll_loss_backward " + tag);
  });
}

// With and without label smoothing.
void cross_entropy_kernel_parity() {
  for_each_softmax_input([](DType t, int64_t n, const Tensor& x, const Tensor&, const Tensor& tgt,
                            const std::string& tag) {
    Tensor gtgt = gpu(tgt), dl = Tensor::full({}, 1.7, t);
    for (double eps : {0.0, 0.1}) {
      std::string e = tag + " eps=" + std::to_string(eps);
      Tensor loss = nan_cpu({}, t), prob = nan_cpu({n, 10}, t);
      Tensor gloss = nan_gpu({}, t), gprob = nan_gpu({n, 10}, t);
      ops::cross_entropy_forward(x, tgt, eps, loss, prob);
      ops::cross_entropy_forward(gpu(x), gtgt, eps, gloss, gprob);
      expect_close(gloss, loss, tol_for(t), "cross_entropy " + e);
      expect_close(gprob, prob, tol_for(t), "cross_entropy prob " + e);
      Tensor d = nan_cpu({n, 10}, t), gd = nan_gpu({n, 10}, t);
      ops::cross_entropy_backward(dl, prob, tgt, eps, d);
      ops::cross_entropy_backward(gpu(dl), gprob, gtgt, eps, gd);
      expect_close(gd, d, tol_for(t), "cross_entropy_backward " + e);
    }
  });
}

// With ties.
void argmax_kernel_parity() {
  for_each_softmax_input([](DType t, int64_t n, const Tensor& x, const Tensor&, const Tensor&,
                            const std::string& tag) {
    Tensor xt = x.contiguous();
    if (t == DType::kFloat32) xt.data<float>()[1] = xt.data<float>()[0] = 9.f;
    Tensor am = Tensor::empty({n}, DType::kInt64), gam = Tensor::full({n}, -1, DType::kInt64, kGpu);
    ops::argmax(xt, am);
    ops::argmax(gpu(xt), gam);
    expect_equal_ints(gam, am, "argmax " + tag);
  });
}

// (was CudaParity.OutOfRangeLabelIsADeferredInputError in tests/ops/test_cuda.cpp)
void cross_entropy_deferred_label_error() {
  Tensor x = Tensor::zeros({2, 10}, DType::kFloat32, kGpu);
  Tensor loss = nan_gpu({}, DType::kFloat32), prob = nan_gpu({2, 10}, DType::kFloat32);
  Tensor t = gpu(Tensor::from_labels({1, 10}));
  ops::cross_entropy_forward(x, t, 0.0, loss, prob);  // queued: cannot throw yet
  EXPECT_THROW(cuda_synchronize(kGpu), InputError);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_NO_THROW(cuda_synchronize(kGpu));  // reported once
}

// (was CudaParity.DiceLossWithWeightsAndIgnoredPixels in tests/ops/test_cuda.cpp)
void dice_loss_kernel_parity() {
  Rng rng(28);
  struct Case {
    Shape x;
    bool weighted;
    double smooth;
  };
  for (const Case& c : {Case{{2, 5, 7, 9}, false, 0.0}, Case{{2, 5, 7, 9}, true, 1.0},
                        Case{{2, 11, 64, 64}, true, 0.0}})
    for (DType t : kFloatTypes) {
      const int64_t n = c.x[0], cls = c.x[1], h = c.x[2], w = c.x[3];
      std::string tag = std::string("dice_loss ") + dtype_name(t) + " " + shape_str(c.x) +
                        (c.weighted ? " weighted" : "");
      Tensor x = randn(c.x, rng, t);
      std::vector<int64_t> labels(n * h * w);
      for (auto& l : labels)  // class 1 absent; about one pixel in five ignored
        l = rng.uniform() < 0.2 ? 255 : static_cast<int64_t>(rng.randint(cls));
      for (auto& l : labels)
        if (l == 1) l = 0;
      Tensor tgt = Tensor::from_labels(labels).view_nograd({n, h, w});
      Tensor wt;
      if (c.weighted) {
        wt = Tensor::empty({cls}, DType::kFloat64);
        for (int64_t j = 0; j < cls; ++j) wt.data<double>()[j] = 0.25 + rng.uniform();
        wt = wt.to(t);
      }
      Tensor loss = nan_cpu({}, t), prob = nan_cpu(c.x, t), cf = nan_cpu({2, cls}, DType::kFloat64);
      Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(c.x, t),
             gcf = nan_gpu({2, cls}, DType::kFloat64);
      ops::dice_loss_forward(x, tgt, wt, 255, c.smooth, 1e-7, loss, prob, cf);
      ops::dice_loss_forward(gpu(x), gpu(tgt), gpu(wt), 255, c.smooth, 1e-7, gloss, gprob, gcf);
      expect_close(gloss, loss, tol_for(t), tag + " loss");
      expect_close(gprob, prob, tol_for(t), tag + " prob");
      expect_close(gcf, cf, tol_for(t), tag + " coef");
      Tensor dl = Tensor::full({}, 1.3, t);
      Tensor d = nan_cpu(c.x, t), gd = nan_gpu(c.x, t);
      ops::dice_loss_backward(dl, prob, tgt, cf, 255, d);
      ops::dice_loss_backward(gpu(dl), gprob, gpu(tgt), gcf, 255, gd);
      expect_close(gd, d, tol_for(t), tag + " dlogits");
    }
}

// (was CudaParity.CrossEntropy2dWeightsAndIgnoredPixels in tests/ops/test_cuda.cpp)
void cross_entropy2d_kernel_parity() {
  Rng rng(25);
  struct Case {
    Shape x;
    bool weighted;
    int64_t ignore_index;
  };
  // The large case runs several hundred blocks in the first pass.
  for (const Case& c : {Case{{2, 5, 7, 9}, false, 255}, Case{{2, 5, 7, 9}, true, 255},
                        Case{{3, 21, 33, 40}, true, -100}, Case{{2, 4, 256, 300}, true, 255},
                        Case{{1, 3, 4, 4}, false, 1}})
    for (DType t : kFloatTypes) {
      const int64_t n = c.x[0], cls = c.x[1], h = c.x[2], w = c.x[3];
      std::string tag = std::string("cross_entropy2d ") + dtype_name(t) + " " + shape_str(c.x) +
                        (c.weighted ? " weighted" : "") + " ignore " +
                        std::to_string(c.ignore_index);
      Tensor x = randn(c.x, rng, t);
      std::vector<int64_t> labels(n * h * w);
      for (auto& l : labels)  // about one pixel in five ignored
        l = rng.uniform() < 0.2 ? c.ignore_index : static_cast<int64_t>(rng.randint(cls));
      Tensor tgt = Tensor::from_labels(labels).view_nograd({n, h, w}), gtgt = gpu(tgt);
      Tensor wt;
      if (c.weighted) {
        wt = Tensor::empty({cls}, DType::kFloat64);
        for (int64_t j = 0; j < cls; ++j) wt.data<double>()[j] = 0.25 + rng.uniform();
        wt = wt.to(t);
      }
      Tensor loss = nan_cpu({}, t), prob = nan_cpu(c.x, t), tw = nan_cpu({}, DType::kFloat64);
      Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(c.x, t), gtw = nan_gpu({}, DType::kFloat64);
      ops::cross_entropy2d_forward(x, tgt, wt, c.ignore_index, loss, prob, tw);
      ops::cross_entropy2d_forward(gpu(x), gtgt, gpu(wt), c.ignore_index, gloss, gprob, gtw);
      expect_close(gloss, loss, tol_for(t), tag + " loss");
      expect_close(gprob, prob, tol_for(t), tag + " prob");
      expect_close(gtw, tw, 1e-12, tag + " total_weight");
      Tensor dl = Tensor::full({}, 1.7, t);
      Tensor d = nan_cpu(c.x, t), gd = nan_gpu(c.x, t);
      ops::cross_entropy2d_backward(dl, prob, tgt, wt, tw, c.ignore_index, d);
      ops::cross_entropy2d_backward(gpu(dl), gprob, gtgt, gpu(wt), gtw, c.ignore_index, gd);
      expect_close(gd, d, tol_for(t), tag + " dlogits");
    }
  // Every pixel ignored: NaN on both backends, as torch; the gradient is 0.
  for (DType t : kFloatTypes) {
    Tensor x = randn({2, 3, 2, 2}, rng, t);
    Tensor tgt = Tensor::full({2, 2, 2}, 255, DType::kInt64);
    Tensor gloss = nan_gpu({}, t), gprob = nan_gpu(x.shape(), t),
           gtw = nan_gpu({}, DType::kFloat64);
    ops::cross_entropy2d_forward(gpu(x), gpu(tgt), Tensor(), 255, gloss, gprob, gtw);
    EXPECT_TRUE(std::isnan(gloss.item())) << dtype_name(t);
    EXPECT_EQ(gtw.item(), 0.0);
    Tensor gd = nan_gpu(x.shape(), t);
    ops::cross_entropy2d_backward(gpu(Tensor::full({}, 1.0, t)), gprob, gpu(tgt), Tensor(), gtw,
                                  255, gd);
    for (double v : gd.to_vector_f64()) ASSERT_EQ(v, 0.0) << dtype_name(t);
  }
}

// (was CudaParity.CrossEntropy2dOutOfRangeLabelIsADeferredInputError in tests/ops/test_cuda.cpp)
void cross_entropy2d_deferred_label_error() {
  Tensor x = Tensor::zeros({2, 4, 3, 3}, DType::kFloat32, kGpu);
  std::vector<int64_t> labels(18, 1);
  labels[13] = 4;  // image 1
  Tensor t = gpu(Tensor::from_labels(labels).view_nograd({2, 3, 3}));
  Tensor loss = nan_gpu({}, DType::kFloat32), prob = nan_gpu({2, 4, 3, 3}, DType::kFloat32);
  Tensor tw = nan_gpu({}, DType::kFloat64);
  ops::cross_entropy2d_forward(x, t, Tensor(), 255, loss, prob, tw);  // queued: cannot throw yet
  try {
    cuda_synchronize(kGpu);
    FAIL() << "no deferred error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("label 4 of sample 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_NO_THROW(cuda_synchronize(kGpu));  // reported once
}

// Every pixel ignored: torch's NaN, and a zero gradient (was in
// Golden.SegmentationOpsMatchPyTorchInFloat64).
void cross_entropy2d_all_ignored_golden() {
  const std::string f = "ops_golden.safetensors";
  Tensor x = golden_entry(f, "cross_entropy2d_all_ignored.x").clone();
  x.set_requires_grad(true);
  Tensor y = F::cross_entropy2d(x, golden_entry(f, "cross_entropy2d_all_ignored.target"));
  EXPECT_TRUE(std::isnan(golden_entry(f, "cross_entropy2d_all_ignored.y").item()));
  EXPECT_TRUE(std::isnan(y.item()));
  y.backward(golden_entry(f, "cross_entropy2d_all_ignored.dy"));
  expect_near_all(x.grad(), golden_entry(f, "cross_entropy2d_all_ignored.dx"), 0, 0,
                  "cross_entropy2d_all_ignored.dx");
}

// LogSoftmax's round trips: a batch of 3 rows of 25 (the exported image reshaped), scaled so
// that some probabilities are tiny, and a classifier head (flatten, linear, log_softmax).
std::vector<ops::OnnxCase> log_softmax_onnx() {
  return {{"log_softmax of 6 x over (3, 25)",
           [](const Tensor& x, auto&) {
             return F::log_softmax(F::mul_scalar(F::reshape(x, {3, 25}), 6.0));
           },
           nullptr,
           {{"LogSoftmax", 1}, {"Reshape", 1}, {"Mul", 1}}},
          {"classifier head: log_softmax(linear(flatten(x)))",
           [](const Tensor& x, auto& p) {
             return F::log_softmax(F::linear(F::flatten(x, 1), p[0], p[1]));
           },
           [](Rng& r) {
             return std::vector<Tensor>{randn({10, 75}, r), randn({10}, r)};
           },
           {{"LogSoftmax", 1}, {"Gemm", 1}, {"Flatten", 1}}}};
}

}  // namespace

ops::OpCases op_cases::log_softmax() {
  return {.samples = log_softmax_samples(),
          .errors = log_softmax_errors(),
          .goldens = {{op_name::log_softmax, {"x"}, [](auto& v) { return F::log_softmax(v[0]); }}},
          .checks = {{"CudaParity", "the kernels, outputs pre-filled with NaN",
                      log_softmax_kernel_parity}},
          .onnx = log_softmax_onnx(),
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::nll_loss() {
  return {.samples = nll_loss_samples(),
          .errors = nll_loss_errors(),
          .goldens = {{op_name::nll_loss,
                       {"x", "target"},
                       [](auto& v) { return F::nll_loss(v[0], v[1]); }}},
          .checks = {{"CudaParity", "the kernels, outputs pre-filled with NaN",
                      nll_loss_kernel_parity}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::cross_entropy() {
  return {.samples = cross_entropy_samples(),
          .errors = cross_entropy_errors(),
          .goldens = {{op_name::cross_entropy,
                       {"x", "target"},
                       [](auto& v) { return F::cross_entropy(v[0], v[1]); }},
                      {"cross_entropy_ls01",
                       {"x", "target"},
                       [](auto& v) { return F::cross_entropy(v[0], v[1], 0.1); }}},
          .checks = {{"CudaParity", "the kernels, with and without label smoothing",
                      cross_entropy_kernel_parity},
                     {"CudaParity", "an out-of-range label is a deferred InputError",
                      cross_entropy_deferred_label_error}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::cross_entropy2d() {
  return {.samples = cross_entropy2d_samples(),
          .errors = cross_entropy2d_errors(),
          .goldens = {{op_name::cross_entropy2d,
                       {"x", "target"},
                       [](auto& v) { return F::cross_entropy2d(v[0], v[1]); }},
                      {"cross_entropy2d_weighted",
                       {"x", "target"},
                       [](auto& v) { return F::cross_entropy2d(v[0], v[1], v[2], 255); },
                       {"weight"}}},
          .checks = {{"PyTorchGoldenFloat64", "every pixel ignored: NaN and a zero gradient",
                      cross_entropy2d_all_ignored_golden},
                     {"CudaParity", "the kernels, weights and ignored pixels",
                      cross_entropy2d_kernel_parity},
                     {"CudaParity", "an out-of-range label is a deferred InputError",
                      cross_entropy2d_deferred_label_error}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::dice_loss() {
  return {.samples = dice_loss_samples(),
          .errors = dice_loss_errors(),
          .goldens = {{op_name::dice_loss,
                       {"x", "target"},
                       [](auto& v) { return F::dice_loss(v[0], v[1]); }},
                      {"dice_loss_weighted",
                       {"x", "target"},
                       [](auto& v) { return F::dice_loss(v[0], v[1], v[2], 255, 1.0); },
                       {"weight"}}},
          .checks = {{"CudaParity", "the kernels, weights and ignored pixels",
                      dice_loss_kernel_parity}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::argmax() {
  return {.errors = argmax_errors(),
          .checks = {{"CudaParity", "the kernel, with ties", argmax_kernel_parity}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
