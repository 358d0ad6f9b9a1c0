// Finite-difference gradient checks in double precision for every op in the op table, one gtest
// per op (Ops/<op>.GradcheckFloat64), and a check that every op has one. Each case builds float64 inputs, takes the analytic gradient of
// L = sum(op(inputs) * R) for a random R through autograd, and compares it with central
// differences (h = 1e-6): |analytic - numeric| <= 1e-7 + 1e-5 * |numeric|.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_record.h"
#include "tests/ops/op_tests.h"

using namespace hpcnet;

namespace {

Tensor randn64(const Shape& s, Rng& rng, double scale = 1.0) {
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * scale;
  return t;
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// L(inputs) = sum(f(inputs) * r), evaluated without autograd.
double weighted_sum(const OpFn& f, const std::vector<Tensor>& in, const Tensor& r) {
  NoGradGuard ng;
  Tensor y = f(in);
  std::vector<double> yv = y.to_vector_f64(), rv = r.to_vector_f64();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += yv[i] * rv[i];
  return s;
}

// Checks every floating-point input of f; integer inputs (targets) are passed through.
void gradcheck(const std::string& label, const OpFn& f, std::vector<Tensor> inputs, uint64_t seed) {
  Rng rng(seed, 99);
  for (auto& t : inputs)
    if (t.dtype() == DType::kFloat64) t.set_requires_grad(true);
  Tensor y = f(inputs);
  Tensor r = randn64(y.shape(), rng);
  y.backward(r);
  const double h = 1e-6;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (x.dtype() != DType::kFloat64) continue;
    ASSERT_TRUE(x.grad().defined()) << label << ": no gradient for input " << k;
    std::vector<double> analytic = x.grad().to_vector_f64();
    double* px = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = px[i];
      px[i] = orig + h;
      double lp = weighted_sum(f, inputs, r);
      px[i] = orig - h;
      double lm = weighted_sum(f, inputs, r);
      px[i] = orig;
      double numeric = (lp - lm) / (2 * h);
      ASSERT_NEAR(analytic[i], numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << label << ": input " << k << " element " << i;
    }
  }
}

struct Case {
  std::string label;
  std::function<void()> run;
};

// Every op in the table maps to at least one case.
std::map<std::string, std::vector<Case>> all_cases() {
  std::map<std::string, std::vector<Case>> c;
  auto add = [&](const std::string& op, const std::string& label, OpFn f,
                 std::function<std::vector<Tensor>(Rng&)> make) {
    c[op].push_back({label, [=] {
                       Rng rng(std::hash<std::string>{}(label), 1);
                       gradcheck(label, f, make(rng), 7);
                     }});
  };
  add(
      "conv2d", "conv2d stride 1 pad 1", [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 6, 6}, r), randn64({4, 3, 3, 3}, r),
                                   randn64({4}, r)};
      });
  add(
      "conv2d", "conv2d stride 2 pad 0 no bias",
      [](auto& v) { return F::conv2d(v[0], v[1], Tensor(), 2, 0); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 7, 7}, r), randn64({3, 2, 3, 3}, r)};
      });
  add(
      "conv2d", "conv2d_relu 5x5", [](auto& v) { return F::conv2d_relu(v[0], v[1], v[2], 1, 0); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 8, 8}, r), randn64({2, 3, 5, 5}, r),
                                   randn64({2}, r)};
      });
  add(
      "conv2d", "conv2d_silu (under autograd: conv2d then silu)",
      [](auto& v) { return F::conv2d_silu(v[0], v[1], v[2], 2, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 7, 7}, r), randn64({4, 3, 3, 3}, r),
                                   randn64({4}, r)};
      });
  add(
      "max_pool2d", "max_pool2d 2x2", [](auto& v) { return F::max_pool2d(v[0], 2, 2); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 6, 6}, r)};
      });
  add(
      "max_pool2d", "max_pool2d 3x3 stride 2 pad 1",
      [](auto& v) { return F::max_pool2d(v[0], 3, 2, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 7, 7}, r)};
      });
  add(
      "linear", "linear", [](auto& v) { return F::linear(v[0], v[1], v[2]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 5}, r), randn64({4, 5}, r), randn64({4}, r)};
      });
  add(
      "linear", "linear_relu no bias", [](auto& v) { return F::linear_relu(v[0], v[1], Tensor()); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 5}, r), randn64({4, 5}, r)};
      });
  add(
      "relu", "relu", [](auto& v) { return F::relu(v[0]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 7}, r)};
      });
  add(
      "add", "add", [](auto& v) { return F::add(v[0], v[1]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 4}, r), randn64({2, 3, 4}, r)};
      });
  add(
      "add", "add same input twice", [](auto& v) { return F::add(v[0], F::relu(v[0])); },
      [](Rng& r) { return std::vector<Tensor>{randn64({5}, r)}; });
  add(
      "reshape", "flatten then linear",
      [](auto& v) { return F::linear(F::flatten(v[0], 1), v[1], Tensor()); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 2, 3}, r), randn64({3, 12}, r)};
      });
  add(
      "log_softmax", "log_softmax", [](auto& v) { return F::log_softmax(v[0]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 5}, r, 3.0)};
      });
  add(
      "nll_loss", "nll_loss of log_softmax",
      [](auto& v) { return F::nll_loss(F::log_softmax(v[0]), v[1]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({4, 5}, r), Tensor::from_labels({0, 4, 2, 2})};
      });
  add(
      "cross_entropy", "cross_entropy", [](auto& v) { return F::cross_entropy(v[0], v[1]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({4, 6}, r, 2.0), Tensor::from_labels({5, 0, 3, 3})};
      });
  add(
      "cross_entropy", "cross_entropy label smoothing 0.1",
      [](auto& v) { return F::cross_entropy(v[0], v[1], 0.1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 4}, r), Tensor::from_labels({1, 0, 3})};
      });
  add(
      "sum", "sum", [](auto& v) { return F::sum(v[0]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 2}, r)};
      });
  add(
      "mean", "mean", [](auto& v) { return F::mean(v[0]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({4, 5}, r)};
      });
  add(
      "batch_norm", "batch_norm training",
      [](auto& v) { return F::batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 2, 3, 2}, r, 2.0), randn64({2}, r), randn64({2}, r)};
      });
  add(
      "batch_norm", "batch_norm eval",
      [](auto& v) {
        Tensor rm = Tensor::from_vector_f64({0.3, -0.2}, {2});
        Tensor rv = Tensor::from_vector_f64({1.5, 0.7}, {2});
        return F::batch_norm(v[0], v[1], v[2], rm, rv, false);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r)};
      });
  add(
      "batch_norm", "batch_norm + residual + relu (fused) without affine",
      [](auto& v) {
        return F::batch_norm_act(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                                 v[1], true);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 2, 3}, r), randn64({2, 3, 2, 3}, r)};
      });
  add(
      "batch_norm", "sync_batch_norm training, one rank",
      [](auto& v) {
        return F::sync_batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), 0.1, 1e-5, Tensor(),
                                      false, F::RankSum{});
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({3, 2, 3, 2}, r, 2.0), randn64({2}, r), randn64({2}, r)};
      });
  add(
      "batch_norm", "sync_batch_norm + residual + relu, an identity rank sum",
      [](auto& v) {
        return F::sync_batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), 0.1, 1e-5, v[3], true,
                                      [](double*, size_t) {});
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r),
                                   randn64({2, 2, 3, 3}, r)};
      });
  add(
      "batch_norm", "batch_norm + residual + relu with affine",
      [](auto& v) {
        return F::batch_norm_act(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5, v[3], true);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 3, 3}, r), randn64({2}, r), randn64({2}, r),
                                   randn64({2, 2, 3, 3}, r)};
      });
  add(
      "global_avg_pool2d", "global_avg_pool2d", [](auto& v) { return F::global_avg_pool2d(v[0]); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 3, 4}, r)};
      });
  add(
      "subsample_pad", "subsample_pad stride 2 pad 2 odd size",
      [](auto& v) { return F::subsample_pad(v[0], 2, 2); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 5, 4}, r)};
      });
  add(
      "subsample_pad", "subsample_pad stride 1 pad 1",
      [](auto& v) { return F::subsample_pad(v[0], 1, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 3, 3}, r)};
      });
  add(
      "dropout", "dropout p 0.3 (fixed mask)",
      [](auto& v) {
        manual_seed(11);  // the same mask on every evaluation
        return F::dropout(v[0], 0.3, true);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({4, 6}, r)};
      });
  add(
      "upsample_nearest2d", "upsample_nearest2d scale 2",
      [](auto& v) { return F::upsample_nearest2d(v[0], 2); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 3, 4}, r)};
      });
  add(
      "upsample_nearest2d", "upsample_nearest2d scale 3 then conv",
      [](auto& v) { return F::conv2d(F::upsample_nearest2d(v[0], 3), v[1], Tensor(), 1, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 2, 3}, r), randn64({2, 2, 3, 3}, r)};
      });
  add(
      "upsample_nearest2d", "upsample_nearest2d scale 1",
      [](auto& v) { return F::upsample_nearest2d(v[0], 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 3, 2}, r)};
      });
  add(
      "cat", "cat dim 1 of three (N, C, H, W)",
      [](auto& v) {
        return F::cat({v[0], v[1], v[2]}, 1);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 2, 3}, r), randn64({2, 1, 2, 3}, r),
                                   randn64({2, 2, 2, 3}, r)};
      });
  add(
      "cat", "cat dim 0 of 2-d, one input twice",
      [](auto& v) {
        return F::cat({v[0], v[1], v[0]}, 0);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3}, r), randn64({1, 3}, r)};
      });
  add(
      "cat", "cat dim -1 with a constant between",
      [](auto& v) {
        return F::cat({v[0], Tensor::full({2, 2, 1}, 0.5, DType::kFloat64), v[1]}, -1);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 3}, r), randn64({2, 2, 2}, r)};
      });
  add(
      "cat", "cat upsampled and skip (U-Net decoder)",
      [](auto& v) {
        return F::conv2d(F::cat({F::upsample_nearest2d(v[0], 2), v[1]}, 1), v[2], Tensor(), 1, 1);
      },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 2, 2}, r), randn64({1, 1, 4, 4}, r),
                                   randn64({2, 3, 3, 3}, r)};
      });
  add(
      "cross_entropy2d", "cross_entropy2d", [](auto& v) { return F::cross_entropy2d(v[0], v[1]); },
      [](Rng& r) {
        Tensor t = Tensor::from_labels({0, 3, 2, 1, 1, 0, 3, 3, 2, 0, 1, 2});
        return std::vector<Tensor>{randn64({2, 4, 2, 3}, r, 2.0), t.view_nograd({2, 2, 3})};
      });
  add(
      "cross_entropy2d", "cross_entropy2d with class weights and ignored pixels",
      [](auto& v) {
        Tensor w = Tensor::from_vector_f64({0.5, 2.0, 1.0, 0.25}, {4});  // a constant
        return F::cross_entropy2d(v[0], v[1], w, 255);
      },
      [](Rng& r) {
        Tensor t = Tensor::from_labels({0, 255, 2, 1, 255, 0, 3, 3, 255, 0, 1, 2});
        return std::vector<Tensor>{randn64({2, 4, 3, 2}, r, 2.0), t.view_nograd({2, 3, 2})};
      });
  add(
      "cross_entropy2d", "cross_entropy2d ignore_index is a class",
      [](auto& v) { return F::cross_entropy2d(v[0], v[1], Tensor(), 1); },
      [](Rng& r) {
        Tensor t = Tensor::from_labels({0, 1, 2, 1, 2, 0});
        return std::vector<Tensor>{randn64({1, 3, 2, 3}, r), t.view_nograd({1, 2, 3})};
      });
  add(
      "conv2d", "conv2d dilation 2 padding 2",
      [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 2, 2); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 2, 5, 6}, r), randn64({3, 2, 3, 3}, r),
                                   randn64({3}, r)};
      });
  add(
      "conv2d", "conv2d dilation 3 stride 2 (relu fused)",
      [](auto& v) { return F::conv2d_relu(v[0], v[1], Tensor(), 2, 1, 3); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 7, 7}, r), randn64({2, 2, 2, 2}, r)};
      });
  add(
      "conv_transpose2d", "conv_transpose2d k2 stride 2 with bias",
      [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 0, 0); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 3, 2}, r), randn64({3, 2, 2, 2}, r),
                                   randn64({2}, r)};
      });
  add(
      "conv_transpose2d", "conv_transpose2d k3 stride 2 padding 1 output_padding 1",
      [](auto& v) { return F::conv_transpose2d(v[0], v[1], Tensor(), 2, 1, 1); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 3, 3}, r), randn64({2, 3, 3, 3}, r)};
      });
  add(
      "conv_transpose2d", "conv_transpose2d k3 stride 1 dilation 2",
      [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 1, 1, 0, 2); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({1, 2, 3, 4}, r), randn64({2, 2, 3, 3}, r),
                                   randn64({2}, r)};
      });
  add(
      "mul_scalar", "mul_scalar by -0.37", [](auto& v) { return F::mul_scalar(v[0], -0.37); },
      [](Rng& r) {
        return std::vector<Tensor>{randn64({2, 3, 2}, r)};
      });
  for (bool align : {false, true}) {
    const std::string a = align ? " align_corners" : "";
    add(
        "upsample_bilinear2d", "upsample_bilinear2d 3x4 -> 7x9" + a,
        [align](auto& v) { return F::upsample_bilinear2d(v[0], 7, 9, align); },
        [](Rng& r) {
          return std::vector<Tensor>{randn64({2, 2, 3, 4}, r)};
        });
    add(
        "upsample_bilinear2d", "upsample_bilinear2d down 6x5 -> 4x2" + a,
        [align](auto& v) { return F::upsample_bilinear2d(v[0], 4, 2, align); },
        [](Rng& r) {
          return std::vector<Tensor>{randn64({1, 2, 6, 5}, r)};
        });
    add(
        "upsample_bilinear2d", "upsample_bilinear2d 1x1 -> 3x2 and 4x1 -> 1x3" + a,
        [align](auto& v) {
          return F::cat({F::reshape(F::upsample_bilinear2d(v[0], 3, 2, align), {1, 1, 6}),
                         F::reshape(F::upsample_bilinear2d(v[1], 1, 3, align), {1, 1, 3})},
                        2);
        },
        [](Rng& r) {
          return std::vector<Tensor>{randn64({1, 1, 1, 1}, r), randn64({1, 1, 4, 1}, r)};
        });
  }
  add(
      "dice_loss", "dice_loss", [](auto& v) { return F::dice_loss(v[0], v[1]); },
      [](Rng& r) {
        Tensor t = Tensor::from_labels({0, 3, 2, 1, 1, 0, 3, 3, 2, 0, 1, 2});
        return std::vector<Tensor>{randn64({2, 4, 2, 3}, r, 2.0), t.view_nograd({2, 2, 3})};
      });
  add(
      "dice_loss", "dice_loss with class weights, ignored pixels, an absent class and smooth",
      [](auto& v) {
        Tensor w = Tensor::from_vector_f64({0.5, 2.0, 1.0, 0.25}, {4});
        return F::dice_loss(v[0], v[1], w, 255, 1.0);
      },
      [](Rng& r) {
        Tensor t = Tensor::from_labels({0, 255, 2, 0, 255, 0, 2, 2, 255, 0, 1, 2});
        return std::vector<Tensor>{randn64({2, 4, 3, 2}, r, 2.0), t.view_nograd({2, 3, 2})};
      });
  add(
      "silu", "silu", [](auto& v) { return F::silu(v[0]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({2, 3, 4}, r, 3.0)}; });
  add(
      "gelu", "gelu", [](auto& v) { return F::gelu(v[0]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({2, 3, 4}, r, 3.0)}; });
  add(
      "gelu", "gelu approximate tanh", [](auto& v) { return F::gelu(v[0], "tanh"); },
      [](Rng& r) { return std::vector<Tensor>{randn64({3, 5}, r, 3.0)}; });
  // softmax, bmm, depthwise_conv2d (YOLO11's attention and DWConv).
  auto r64 = [](Shape s) {
    return [s](Rng& r) { return std::vector<Tensor>{randn64(s, r, 2.0)}; };
  };
  add(
      "softmax", "softmax dim -1 (rows)", [](auto& v) { return F::softmax(v[0], -1); },
      r64({2, 3, 5}));
  add(
      "softmax", "softmax dim 1 of 3", [](auto& v) { return F::softmax(v[0], 1); }, r64({2, 4, 3}));
  add(
      "softmax", "softmax dim 0", [](auto& v) { return F::softmax(v[0], 0); }, r64({3, 4}));
  add(
      "softmax", "softmax dim -3 of 4-D", [](auto& v) { return F::softmax(v[0], -3); },
      r64({2, 3, 2, 2}));
  auto two = [](Shape a, Shape b) {
    return [a, b](Rng& r) { return std::vector<Tensor>{randn64(a, r), randn64(b, r)}; };
  };
  add(
      "bmm", "bmm", [](auto& v) { return F::bmm(v[0], v[1]); }, two({2, 3, 4}, {2, 4, 5}));
  add(
      "bmm", "bmm a transposed (q^T k)", [](auto& v) { return F::bmm(v[0], v[1], true, false); },
      two({3, 4, 5}, {3, 4, 2}));
  add(
      "bmm", "bmm b transposed (v attn^T)", [](auto& v) { return F::bmm(v[0], v[1], false, true); },
      two({2, 3, 4}, {2, 5, 4}));
  add(
      "bmm", "bmm both transposed", [](auto& v) { return F::bmm(v[0], v[1], true, true); },
      two({2, 4, 3}, {2, 5, 4}));
  add(
      "bmm", "bmm of narrowed operands",
      [](auto& v) {
        return F::bmm(F::narrow(v[0], 1, 1, 3), F::narrow(v[0], 1, 4, 3), true, false);
      },
      r64({2, 7, 4}));
  auto dw = [](Shape x, Shape w, bool bias) {
    return [x, w, bias](Rng& r) {
      std::vector<Tensor> v{randn64(x, r), randn64(w, r)};
      if (bias) v.push_back(randn64({w[0]}, r));
      return v;
    };
  };
  add(
      "depthwise_conv2d", "depthwise_conv2d 3x3 pad 1 bias",
      [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 1); },
      dw({2, 3, 5, 6}, {3, 1, 3, 3}, true));
  add(
      "depthwise_conv2d", "depthwise_conv2d stride 2 no bias",
      [](auto& v) { return F::depthwise_conv2d(v[0], v[1], Tensor(), 2, 1); },
      dw({2, 2, 7, 6}, {2, 1, 3, 3}, false));
  add(
      "depthwise_conv2d", "depthwise_conv2d dilation 2 pad 2 5x5",
      [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 1, 2, 2); },
      dw({1, 3, 6, 7}, {3, 1, 5, 5}, true));
  add(
      "depthwise_conv2d", "depthwise_conv2d 2x3 filter stride 3 pad 0",
      [](auto& v) { return F::depthwise_conv2d(v[0], v[1], v[2], 3, 0); },
      dw({2, 2, 8, 8}, {2, 1, 2, 3}, true));
  add(
      "sigmoid", "sigmoid", [](auto& v) { return F::sigmoid(v[0]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({3, 5}, r, 3.0)}; });
  add(
      "mul", "mul", [](auto& v) { return F::mul(v[0], v[1]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({2, 3, 2}, r), randn64({2, 3, 2}, r)}; });
  add(
      "mul", "mul of a tensor by itself", [](auto& v) { return F::mul(v[0], v[0]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({5}, r)}; });
  add(
      "narrow", "narrow of channels, two chunks used twice",
      [](auto& v) {
        Tensor a = F::narrow(v[0], 1, 0, 2), b = F::narrow(v[0], 1, 2, 3);
        return F::cat({F::reshape(F::mul(a, a), {-1}), F::reshape(b, {-1}),
                       F::reshape(F::narrow(v[0], -1, 1, 2), {-1})},
                      0);
      },
      [](Rng& r) { return std::vector<Tensor>{randn64({2, 5, 3}, r)}; });
  add(
      "bce_with_logits", "bce_with_logits, soft targets",
      [](auto& v) {
        Tensor t = Tensor::from_vector_f64({0, 1, 0.3, 0.9, 0, 0, 1, 0.5, 0.05, 0, 0.7, 1}, {3, 4});
        return F::bce_with_logits(v[0], t);
      },
      [](Rng& r) { return std::vector<Tensor>{randn64({3, 4}, r, 4.0)}; });
  add(
      "gather_anchors", "gather_anchors with a repeated anchor",
      [](auto& v) {
        return F::gather_anchors(v[0], Tensor::from_labels({5, 0, 7, 5}));
      },
      [](Rng& r) { return std::vector<Tensor>{randn64({2, 3, 4}, r)}; });
  add(
      "dfl_expect", "dfl_expect", [](auto& v) { return F::dfl_expect(v[0]); },
      [](Rng& r) { return std::vector<Tensor>{randn64({5, 16}, r, 2.0)}; });
  add(
      "ciou_loss", "ciou_loss, full derivative (alpha_grad)",
      [](auto& v) {
        // Boxes (x1, y1, x2, y2) from v[0] (M, 4) as (cx, cy, log w, log h) offsets, so sizes
        // stay positive and no min/max ties occur.
        Tensor target = Tensor::from_vector_f64(
            {2, 3, 6, 9, 0, 0, 4, 4, 10, 10, 12, 20, -3, 1, 5, 2}, {4, 4});
        Tensor w = Tensor::from_vector_f64({1.0, 0.5, 2.0, 0.25}, {4});
        return F::ciou_loss(v[0], target, w, true);
      },
      [](Rng& r) {
        Tensor p = Tensor::from_vector_f64(
            {2.5, 2.1, 6.7, 8.2, 1.3, -0.4, 3.1, 5.6, 9.1, 12.2, 14.3, 17.7, -2.2, 0.3, 4.1, 2.9},
            {4, 4});
        double* pp = p.data<double>();
        for (int64_t i = 0; i < 16; ++i) pp[i] += 0.05 * r.normal();
        return std::vector<Tensor>{p};
      });
  add(
      "ciou_loss", "ciou_loss of disjoint boxes, full derivative",
      [](auto& v) {
        Tensor target = Tensor::from_vector_f64({10, 10, 14, 11}, {1, 4});
        return F::ciou_loss(v[0], target, Tensor::from_vector_f64({1.5}, {1}), true);
      },
      [](Rng&) { return std::vector<Tensor>{Tensor::from_vector_f64({0, 1, 3, 7}, {1, 4})}; });
  add(
      "dfl_loss", "dfl_loss, targets inside and at both clamps",
      [](auto& v) {
        Tensor t = Tensor::from_vector_f64({0.3, 7.5, 14.99, 20.0, -1.0, 3.0}, {6});
        Tensor w = Tensor::from_vector_f64({1, 0.5, 2, 1, 0.25, 1}, {6});
        return F::dfl_loss(v[0], t, w);
      },
      [](Rng& r) { return std::vector<Tensor>{randn64({6, 16}, r, 2.0)}; });
  return c;
}

}  // namespace

TEST(Gradcheck, EveryOpInTheTableHasACase) {
  auto cases = all_cases();
  std::set<std::string> table;
  for (const auto* op : op_record::kAll) {
    table.insert(op->name);
    EXPECT_TRUE(cases.count(op->name)) << "op '" << op->name << "' has no gradient check";
  }
  for (auto& [name, c] : cases) EXPECT_TRUE(table.count(name)) << name << " is not in the op table";
}

// Ops/<op>.GradcheckFloat64: every case of the op (stopping at the op's first failing element).
const bool kGradchecksRegistered = [] {
  for (auto& [op, cases] : all_cases())
    test_util::register_op_check(
        op, "GradcheckFloat64",
        [cases = cases] {
          for (auto& c : cases) {
            SCOPED_TRACE(c.label);
            c.run();
            if (testing::Test::HasFatalFailure()) return;
          }
        },
        __FILE__, __LINE__);
  return true;
}();

TEST(Gradcheck, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector_f64({1, -2, 3}, {3});
  x.set_requires_grad(true);
  F::sum(F::relu(x)).backward();
  F::sum(x).backward();
  EXPECT_EQ(x.grad().to_vector_f64(), (std::vector<double>{2, 1, 2}));
}

TEST(Gradcheck, NoGradRecordsNothing) {
  Tensor x = Tensor::from_vector_f64({1, 2}, {2});
  x.set_requires_grad(true);
  NoGradGuard ng;
  Tensor y = F::relu(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}
