// Error inputs for every op (PyTorch's OpInfo error_inputs idea): one table of bad calls (wrong
// ranks, mismatched shapes, wrong dtypes, empty tensors, out-of-range sizes, strides and dims,
// undefined tensors), each with the substrings its error must contain. Every row must throw a
// typed hpcnet error (InputError or Error; never std::bad_alloc, std::out_of_range, a crash or a
// hang) whose message names the op and the offending shapes or values, or, where hpcnet returns
// what torch returns (relu of an empty tensor, conv2d of a batch of 0), that result. The table
// runs on the CPU and, where a GPU is present, on CUDA tensors; every op of the op table (and
// argmax) needs at least 3 rows, so a new op without error rows fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/functional.h"
#include "src/core/cuda_device.h"
#include "src/ops/op_record.h"
#include "tests/ops/op_tests.h"

using namespace hpcnet;

namespace {

// Zero-filled tensors of a shape, dtype and device (targets of zeros are valid class 0).
Tensor f32(const Shape& s, Device d) { return Tensor::zeros(s, DType::kFloat32, d); }
Tensor f64(const Shape& s, Device d) { return Tensor::zeros(s, DType::kFloat64, d); }
Tensor i64(const Shape& s, Device d) { return Tensor::zeros(s, DType::kInt64, d); }
Tensor u8(const Shape& s, Device d) { return Tensor::zeros(s, DType::kUInt8, d); }
// A target (N, H, W) or (N,) with one value changed.
Tensor labels_with(const Shape& s, int64_t at, int64_t value, Device d) {
  Tensor t = Tensor::zeros(s, DType::kInt64);
  t.data<int64_t>()[at] = value;
  return t.to(d);
}
const Tensor kNone;  // an undefined tensor

struct Row {
  const char* op;
  const char* what;
  std::function<Tensor(Device)> call;
  // The substrings the error must contain besides the op's name; no error expected when empty.
  std::vector<std::string> message;
  bool expect_error = true;
  Shape result_shape;           // the result's shape when no error is expected
  std::optional<double> value;  // a 0-d result's value (NaN matches NaN)
  // A bad label: CUDA finds it asynchronously and raises it at the next synchronisation, from
  // the device's error slot, which does not know the op (the label and its range it does).
  bool deferred_on_cuda = false;
};

Row err(const char* op, const char* what, std::function<Tensor(Device)> call,
        std::vector<std::string> message) {
  return Row{op, what, std::move(call), std::move(message), true, {}, std::nullopt, false};
}
Row err_label(const char* op, const char* what, std::function<Tensor(Device)> call,
              std::vector<std::string> message) {
  return Row{op, what, std::move(call), std::move(message), true, {}, std::nullopt, true};
}
Row ok(const char* op, const char* what, std::function<Tensor(Device)> call, Shape shape) {
  return Row{op, what, std::move(call), {}, false, std::move(shape), std::nullopt, false};
}
Row ok_value(const char* op, const char* what, std::function<Tensor(Device)> call, double value) {
  return Row{op, what, std::move(call), {}, false, Shape{}, value, false};
}

using D = Device;

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      // ---- conv2d (N, C, H, W) * (K, C, R, S) ----
      err("conv2d", "input of rank 3",
          [](D d) {
            return F::conv2d(f32({3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"(3, 8, 8)"}),
      err("conv2d", "weight of rank 2",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 27}, d), kNone);
          },
          {"(4, 27)", "(1, 3, 8, 8)"}),
      err("conv2d", "weight channels differ from the input's",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 2, 3, 3}, d), kNone);
          },
          {"(4, 2, 3, 3)", "(1, 3, 8, 8)"}),
      err("conv2d", "bias of the wrong size",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(4,)"}),
      err("conv2d", "int64 input and weight",
          [](D d) {
            return F::conv2d(i64({1, 3, 8, 8}, d), i64({4, 3, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("conv2d", "uint8 input",
          [](D d) {
            return F::conv2d(u8({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"uint8"}),
      err("conv2d", "float64 weight with a float32 input",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f64({4, 3, 3, 3}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("conv2d", "stride 0",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("conv2d", "padding -1",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 1, -1);
          },
          {"padding -1"}),
      err("conv2d", "dilation 0",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), kNone, 1, 0, 0);
          },
          {"dilation 0"}),
      err("conv2d", "kernel larger than the input",
          [](D d) {
            return F::conv2d(f32({1, 3, 2, 2}, d), f32({4, 3, 3, 3}, d), kNone);
          },
          {"(4, 3, 3, 3)", "(1, 3, 2, 2)"}),
      err("conv2d", "kernel larger than the input, stride 2",
          [](D d) {
            return F::conv2d(f32({1, 3, 2, 2}, d), f32({4, 3, 3, 3}, d), kNone, 2);
          },
          {"(4, 3, 3, 3)", "(1, 3, 2, 2)"}),
      ok("conv2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::conv2d(f32({0, 3, 8, 8}, d), f32({4, 3, 3, 3}, d), f32({4}, d));
         },
         {0, 4, 6, 6}),
      err("conv2d", "input with 0 channels",
          [](D d) {
            return F::conv2d(f32({1, 0, 8, 8}, d), f32({4, 0, 3, 3}, d), kNone);
          },
          {"(1, 0, 8, 8)"}),
      err("conv2d", "undefined input",
          [](D d) {
            return F::conv2d(kNone, f32({4, 3, 3, 3}, d), kNone);
          },
          {"undefined"}),
      err("conv2d", "undefined weight",
          [](D d) {
            return F::conv2d(f32({1, 3, 8, 8}, d), kNone, kNone);
          },
          {"undefined"}),

      // ---- conv_transpose2d (N, C, H, W) * (C, K, R, S) ----
      err("conv_transpose2d", "input of rank 3",
          [](D d) {
            return F::conv_transpose2d(f32({3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone);
          },
          {"(3, 4, 4)"}),
      err("conv_transpose2d", "weight in-channels differ from the input's",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({2, 5, 3, 3}, d), kNone);
          },
          {"(2, 5, 3, 3)", "(1, 3, 4, 4)"}),
      err("conv_transpose2d", "int64 input",
          [](D d) {
            return F::conv_transpose2d(i64({1, 3, 4, 4}, d), i64({3, 5, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("conv_transpose2d", "float64 weight with a float32 input",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f64({3, 5, 3, 3}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("conv_transpose2d", "bias of the wrong size",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(5,)"}),
      err("conv_transpose2d", "stride 0",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("conv_transpose2d", "padding -1",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 1, -1);
          },
          {"padding -1"}),
      err("conv_transpose2d", "output_padding not smaller than stride",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), kNone, 2, 0, 2);
          },
          {"output_padding 2", "stride 2"}),
      err("conv_transpose2d", "padding that leaves no output",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 1, 1}, d), f32({3, 5, 1, 1}, d), kNone, 1, 1);
          },
          {"padding 1", "(1, 3, 1, 1)"}),
      err("conv_transpose2d", "input with 0 channels",
          [](D d) {
            return F::conv_transpose2d(f32({1, 0, 4, 4}, d), f32({0, 5, 3, 3}, d), kNone);
          },
          {"(1, 0, 4, 4)"}),
      ok("conv_transpose2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::conv_transpose2d(f32({0, 3, 4, 4}, d), f32({3, 5, 3, 3}, d), f32({5}, d));
         },
         {0, 5, 6, 6}),
      err("conv_transpose2d", "undefined input",
          [](D d) {
            return F::conv_transpose2d(kNone, f32({3, 5, 3, 3}, d), kNone);
          },
          {"undefined"}),
      err("conv_transpose2d", "undefined weight",
          [](D d) {
            return F::conv_transpose2d(f32({1, 3, 4, 4}, d), kNone, kNone);
          },
          {"undefined"}),

      // ---- max_pool2d ----
      err("max_pool2d", "input of rank 3",
          [](D d) {
            return F::max_pool2d(f32({3, 8, 8}, d), 2);
          },
          {"(3, 8, 8)"}),
      err("max_pool2d", "kernel_size 0",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 0);
          },
          {"kernel_size 0"}),
      err("max_pool2d", "stride -1",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, -1);
          },
          {"stride -1"}),
      err("max_pool2d", "padding -1",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, 2, -1);
          },
          {"padding -1"}),
      err("max_pool2d", "padding over half the kernel",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 8, 8}, d), 2, 2, 2);
          },
          {"padding 2"}),
      err("max_pool2d", "window larger than the input",
          [](D d) {
            return F::max_pool2d(f32({1, 3, 2, 2}, d), 3);
          },
          {"(1, 3, 2, 2)"}),
      err("max_pool2d", "int64 input",
          [](D d) {
            return F::max_pool2d(i64({1, 3, 8, 8}, d), 2);
          },
          {"int64"}),
      ok("max_pool2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::max_pool2d(f32({0, 3, 8, 8}, d), 2);
         },
         {0, 3, 4, 4}),
      err("max_pool2d", "undefined input", [](D) { return F::max_pool2d(kNone, 2); },
          {"undefined"}),

      // ---- linear (N, IN) * (OUT, IN) ----
      err("linear", "input of rank 1",
          [](D d) {
            return F::linear(f32({8}, d), f32({4, 8}, d), kNone);
          },
          {"(8,)"}),
      err("linear", "weight of rank 3",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8, 1}, d), kNone);
          },
          {"(4, 8, 1)"}),
      err("linear", "in_features differ",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 7}, d), kNone);
          },
          {"(4, 7)", "(2, 8)"}),
      err("linear", "bias of the wrong size",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8}, d), f32({3}, d));
          },
          {"bias", "(3,)", "(4,)"}),
      err("linear", "float64 weight with a float32 input",
          [](D d) {
            return F::linear(f32({2, 8}, d), f64({4, 8}, d), kNone);
          },
          {"weight", "float64", "float32"}),
      err("linear", "float64 bias with a float32 input",
          [](D d) {
            return F::linear(f32({2, 8}, d), f32({4, 8}, d), f64({4}, d));
          },
          {"bias", "float64", "float32"}),
      err("linear", "int64 input and weight",
          [](D d) {
            return F::linear(i64({2, 8}, d), i64({4, 8}, d), kNone);
          },
          {"int64"}),
      err("linear", "0 in_features",
          [](D d) {
            return F::linear(f32({2, 0}, d), f32({4, 0}, d), kNone);
          },
          {"(2, 0)"}),
      ok("linear", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::linear(f32({0, 8}, d), f32({4, 8}, d), f32({4}, d));
         },
         {0, 4}),
      err("linear", "undefined input",
          [](D d) {
            return F::linear(kNone, f32({4, 8}, d), kNone);
          },
          {"undefined"}),
      err("linear", "undefined weight",
          [](D d) {
            return F::linear(f32({2, 8}, d), kNone, kNone);
          },
          {"undefined"}),

      // ---- relu ----
      err("relu", "int64 input",
          [](D d) {
            return F::relu(i64({2, 3}, d));
          },
          {"int64"}),
      err("relu", "uint8 input",
          [](D d) {
            return F::relu(u8({2, 3}, d));
          },
          {"uint8"}),
      ok("relu", "empty input (torch: an empty output)",
         [](D d) {
           return F::relu(f32({0, 3}, d));
         },
         {0, 3}),
      err("relu", "undefined input", [](D) { return F::relu(kNone); }, {"undefined"}),

      // ---- add ----
      err("add", "shapes differ",
          [](D d) {
            return F::add(f32({2, 3}, d), f32({3, 2}, d));
          },
          {"(2, 3)", "(3, 2)"}),
      err("add", "float64 and float32",
          [](D d) {
            return F::add(f32({2, 3}, d), f64({2, 3}, d));
          },
          {"float64", "float32"}),
      err("add", "int64 inputs",
          [](D d) {
            return F::add(i64({2, 3}, d), i64({2, 3}, d));
          },
          {"int64"}),
      ok("add", "empty inputs (torch: an empty output)",
         [](D d) {
           return F::add(f32({0, 3}, d), f32({0, 3}, d));
         },
         {0, 3}),
      err("add", "undefined first input",
          [](D d) {
            return F::add(kNone, f32({2, 3}, d));
          },
          {"undefined"}),
      err("add", "undefined second input",
          [](D d) {
            return F::add(f32({2, 3}, d), kNone);
          },
          {"undefined"}),

      // ---- mul_scalar ----
      err("mul_scalar", "int64 input",
          [](D d) {
            return F::mul_scalar(i64({2, 3}, d), 2.0);
          },
          {"int64"}),
      err("mul_scalar", "uint8 input",
          [](D d) {
            return F::mul_scalar(u8({2, 3}, d), 2.0);
          },
          {"uint8"}),
      ok("mul_scalar", "empty input (torch: an empty output)",
         [](D d) {
           return F::mul_scalar(f32({0, 3}, d), 2.0);
         },
         {0, 3}),
      err("mul_scalar", "undefined input", [](D) { return F::mul_scalar(kNone, 2.0); },
          {"undefined"}),

      // ---- reshape ----
      err("reshape", "element counts differ",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {4, 2});
          },
          {"(4, 2)", "(2, 3)"}),
      err("reshape", "two -1 dims",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {-1, -1});
          },
          {"(-1, -1)"}),
      err("reshape", "negative sizes",
          [](D d) {
            return F::reshape(f32({2, 3}, d), {-2, -3});
          },
          {"(-2, -3)"}),
      err("reshape", "-1 beside a 0 (any size would do)",
          [](D d) {
            return F::reshape(f32({0, 3}, d), {-1, 0});
          },
          {"(-1, 0)", "(0, 3)"}),
      ok("reshape", "empty input (torch: an empty view)",
         [](D d) {
           return F::reshape(f32({0, 3}, d), {3, 0});
         },
         {3, 0}),
      err("reshape", "undefined input",
          [](D) {
            return F::reshape(kNone, {2, 3});
          },
          {"undefined"}),

      // ---- log_softmax over dim 1 of (N, C) ----
      err("log_softmax", "input of rank 1", [](D d) { return F::log_softmax(f32({3}, d)); },
          {"(3,)"}),
      err("log_softmax", "input of rank 3",
          [](D d) {
            return F::log_softmax(f32({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("log_softmax", "int64 input",
          [](D d) {
            return F::log_softmax(i64({2, 3}, d));
          },
          {"int64"}),
      ok("log_softmax", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::log_softmax(f32({0, 3}, d));
         },
         {0, 3}),
      ok("log_softmax", "0 classes (torch: an empty output)",
         [](D d) {
           return F::log_softmax(f32({2, 0}, d));
         },
         {2, 0}),
      err("log_softmax", "undefined input", [](D) { return F::log_softmax(kNone); }, {"undefined"}),

      // ---- nll_loss (N, C) at (N,) ----
      err("nll_loss", "input of rank 3",
          [](D d) {
            return F::nll_loss(f32({2, 3, 4}, d), i64({2}, d));
          },
          {"(2, 3, 4)"}),
      err("nll_loss", "target of another length",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), i64({3}, d));
          },
          {"target", "(3,)", "(2,)"}),
      err("nll_loss", "float32 target",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), f32({2}, d));
          },
          {"target", "float32", "int64"}),
      err("nll_loss", "int64 input",
          [](D d) {
            return F::nll_loss(i64({2, 3}, d), i64({2}, d));
          },
          {"int64"}),
      err_label("nll_loss", "label out of range",
                [](D d) {
                  return F::nll_loss(f32({2, 3}, d), labels_with({2}, 1, 5, d));
                },
                {"label 5", "[0, 3)"}),
      err("nll_loss", "batch of 0 (hpcnet: an error; torch: NaN)",
          [](D d) {
            return F::nll_loss(f32({0, 3}, d), i64({0}, d));
          },
          {"empty", "(0, 3)"}),
      err("nll_loss", "undefined input", [](D d) { return F::nll_loss(kNone, i64({2}, d)); },
          {"undefined"}),
      err("nll_loss", "undefined target",
          [](D d) {
            return F::nll_loss(f32({2, 3}, d), kNone);
          },
          {"undefined"}),

      // ---- cross_entropy (N, C) at (N,) ----
      err("cross_entropy", "input of rank 1",
          [](D d) { return F::cross_entropy(f32({3}, d), i64({1}, d)); }, {"(3,)"}),
      err("cross_entropy", "target of another length",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), i64({3}, d));
          },
          {"target", "(3,)", "(2,)"}),
      err("cross_entropy", "uint8 target",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), u8({2}, d));
          },
          {"target", "uint8", "int64"}),
      err("cross_entropy", "int64 input",
          [](D d) {
            return F::cross_entropy(i64({2, 3}, d), i64({2}, d));
          },
          {"int64"}),
      err_label("cross_entropy", "label out of range",
                [](D d) {
                  return F::cross_entropy(f32({2, 3}, d), labels_with({2}, 0, -1, d));
                },
                {"label -1", "[0, 3)"}),
      err("cross_entropy", "label_smoothing 1.5",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), i64({2}, d), 1.5);
          },
          {"label_smoothing", "1.5"}),
      err("cross_entropy", "batch of 0 (hpcnet: an error; torch: NaN)",
          [](D d) {
            return F::cross_entropy(f32({0, 3}, d), i64({0}, d));
          },
          {"empty", "(0, 3)"}),
      err("cross_entropy", "undefined input",
          [](D d) { return F::cross_entropy(kNone, i64({2}, d)); }, {"undefined"}),
      err("cross_entropy", "undefined target",
          [](D d) {
            return F::cross_entropy(f32({2, 3}, d), kNone);
          },
          {"undefined"}),

      // ---- sum, mean ----
      err("sum", "int64 input",
          [](D d) {
            return F::sum(i64({2, 3}, d));
          },
          {"int64"}),
      err("sum", "uint8 input",
          [](D d) {
            return F::sum(u8({2, 3}, d));
          },
          {"uint8"}),
      ok_value(
          "sum", "empty input (torch: 0)", [](D d) { return F::sum(f32({0, 3}, d)); }, 0.0),
      err("sum", "undefined input", [](D) { return F::sum(kNone); }, {"undefined"}),
      err("mean", "int64 input",
          [](D d) {
            return F::mean(i64({2, 3}, d));
          },
          {"int64"}),
      err("mean", "uint8 input",
          [](D d) {
            return F::mean(u8({2, 3}, d));
          },
          {"uint8"}),
      ok_value(
          "mean", "empty input (torch: NaN)", [](D d) { return F::mean(f32({0, 3}, d)); }, NAN),
      err("mean", "undefined input", [](D) { return F::mean(kNone); }, {"undefined"}),

      // ---- batch_norm over (N, C, H, W) ----
      err("batch_norm", "input of rank 2",
          [](D d) {
            return F::batch_norm(f32({4, 3}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(4, 3)"}),
      err("batch_norm", "weight of the wrong size",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), f32({4}, d), kNone, kNone, kNone, true);
          },
          {"weight", "(3,)", "(4,)"}),
      err("batch_norm", "running_mean of the wrong size",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, f32({2}, d), f32({3}, d),
                                 false);
          },
          {"running_mean", "(2,)"}),
      err("batch_norm", "eval without running statistics",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, false);
          },
          {"running_mean"}),
      err("batch_norm", "training with one value per channel",
          [](D d) {
            return F::batch_norm(f32({1, 3, 1, 1}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(1, 3, 1, 1)"}),
      err("batch_norm", "eps 0",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true, 0.1, 0.0);
          },
          {"eps 0"}),
      err("batch_norm", "momentum 2",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true, 2.0);
          },
          {"momentum 2"}),
      err("batch_norm", "int64 input",
          [](D d) {
            return F::batch_norm(i64({2, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true);
          },
          {"int64"}),
      err("batch_norm", "float64 weight with a float32 input",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), f64({3}, d), f32({3}, d), kNone, kNone,
                                 true);
          },
          {"weight", "float64", "float32"}),
      err("batch_norm", "float64 running_var with a float32 input",
          [](D d) {
            return F::batch_norm(f32({2, 3, 4, 4}, d), kNone, kNone, f32({3}, d), f64({3}, d),
                                 false);
          },
          {"running_var", "float64", "float32"}),
      err("batch_norm", "training on a batch of 0 (as torch)",
          [](D d) {
            return F::batch_norm(f32({0, 3, 4, 4}, d), kNone, kNone, kNone, kNone, true);
          },
          {"(0, 3, 4, 4)"}),
      ok("batch_norm", "eval on a batch of 0 (torch: an empty output)",
         [](D d) {
           return F::batch_norm(f32({0, 3, 4, 4}, d), kNone, kNone, f32({3}, d), f32({3}, d),
                                false);
         },
         {0, 3, 4, 4}),
      ok("batch_norm", "0 channels (torch: an empty output)",
         [](D d) {
           return F::batch_norm(f32({2, 0, 4, 4}, d), kNone, kNone, kNone, kNone, true);
         },
         {2, 0, 4, 4}),
      err("batch_norm", "undefined input",
          [](D) { return F::batch_norm(kNone, kNone, kNone, kNone, kNone, true); }, {"undefined"}),

      // ---- global_avg_pool2d ----
      err("global_avg_pool2d", "input of rank 3",
          [](D d) {
            return F::global_avg_pool2d(f32({3, 4, 4}, d));
          },
          {"(3, 4, 4)"}),
      err("global_avg_pool2d", "int64 input",
          [](D d) {
            return F::global_avg_pool2d(i64({1, 3, 4, 4}, d));
          },
          {"int64"}),
      err("global_avg_pool2d", "height 0 (as torch)",
          [](D d) {
            return F::global_avg_pool2d(f32({1, 3, 0, 4}, d));
          },
          {"(1, 3, 0, 4)"}),
      ok("global_avg_pool2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::global_avg_pool2d(f32({0, 3, 4, 4}, d));
         },
         {0, 3}),
      err("global_avg_pool2d", "undefined input", [](D) { return F::global_avg_pool2d(kNone); },
          {"undefined"}),

      // ---- subsample_pad ----
      err("subsample_pad", "input of rank 3",
          [](D d) {
            return F::subsample_pad(f32({3, 4, 4}, d), 2, 1);
          },
          {"(3, 4, 4)"}),
      err("subsample_pad", "stride 0",
          [](D d) {
            return F::subsample_pad(f32({1, 3, 4, 4}, d), 0, 1);
          },
          {"stride 0"}),
      err("subsample_pad", "pad -1",
          [](D d) {
            return F::subsample_pad(f32({1, 3, 4, 4}, d), 2, -1);
          },
          {"pad -1"}),
      err("subsample_pad", "int64 input",
          [](D d) {
            return F::subsample_pad(i64({1, 3, 4, 4}, d), 2, 1);
          },
          {"int64"}),
      ok("subsample_pad", "batch of 0 (an empty output)",
         [](D d) {
           return F::subsample_pad(f32({0, 3, 4, 4}, d), 2, 1);
         },
         {0, 5, 2, 2}),
      err("subsample_pad", "undefined input", [](D) { return F::subsample_pad(kNone, 2, 1); },
          {"undefined"}),

      // ---- dropout ----
      err("dropout", "p -0.1",
          [](D d) {
            return F::dropout(f32({2, 3}, d), -0.1);
          },
          {"-0.1"}),
      err("dropout", "p 1.5",
          [](D d) {
            return F::dropout(f32({2, 3}, d), 1.5);
          },
          {"1.5"}),
      err("dropout", "p NaN",
          [](D d) {
            return F::dropout(f32({2, 3}, d), NAN);
          },
          {"nan"}),
      err("dropout", "int64 input",
          [](D d) {
            return F::dropout(i64({2, 3}, d), 0.5);
          },
          {"int64"}),
      ok("dropout", "empty input (torch: an empty output)",
         [](D d) {
           return F::dropout(f32({0, 3}, d), 0.5);
         },
         {0, 3}),
      err("dropout", "undefined input", [](D) { return F::dropout(kNone, 0.5); }, {"undefined"}),

      // ---- upsample_nearest2d ----
      err("upsample_nearest2d", "input of rank 3",
          [](D d) {
            return F::upsample_nearest2d(f32({3, 4, 4}, d), 2);
          },
          {"(3, 4, 4)"}),
      err("upsample_nearest2d", "scale 0",
          [](D d) {
            return F::upsample_nearest2d(f32({1, 3, 4, 4}, d), 0);
          },
          {"scale", "got 0", "(1, 3, 4, 4)"}),
      err("upsample_nearest2d", "scale -2",
          [](D d) {
            return F::upsample_nearest2d(f32({1, 3, 4, 4}, d), -2);
          },
          {"got -2"}),
      err("upsample_nearest2d", "int64 input",
          [](D d) {
            return F::upsample_nearest2d(i64({1, 3, 4, 4}, d), 2);
          },
          {"int64"}),
      ok("upsample_nearest2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::upsample_nearest2d(f32({0, 3, 4, 4}, d), 2);
         },
         {0, 3, 8, 8}),
      err("upsample_nearest2d", "undefined input",
          [](D) { return F::upsample_nearest2d(kNone, 2); }, {"undefined"}),

      // ---- upsample_bilinear2d ----
      err("upsample_bilinear2d", "input of rank 3",
          [](D d) {
            return F::upsample_bilinear2d(f32({3, 4, 4}, d), 8, 8);
          },
          {"(3, 4, 4)"}),
      err("upsample_bilinear2d", "output height 0",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 4, 4}, d), 0, 8);
          },
          {"0x8"}),
      err("upsample_bilinear2d", "output width -1",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 4, 4}, d), 8, -1);
          },
          {"8x-1"}),
      err("upsample_bilinear2d", "input height 0",
          [](D d) {
            return F::upsample_bilinear2d(f32({1, 3, 0, 4}, d), 8, 8);
          },
          {"(1, 3, 0, 4)"}),
      err("upsample_bilinear2d", "int64 input",
          [](D d) {
            return F::upsample_bilinear2d(i64({1, 3, 4, 4}, d), 8, 8);
          },
          {"int64"}),
      ok("upsample_bilinear2d", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::upsample_bilinear2d(f32({0, 3, 4, 4}, d), 8, 8);
         },
         {0, 3, 8, 8}),
      err("upsample_bilinear2d", "undefined input",
          [](D) { return F::upsample_bilinear2d(kNone, 8, 8); }, {"undefined"}),

      // ---- cat ----
      err("cat", "no tensors", [](D) { return F::cat({}, 0); }, {"at least one"}),
      err("cat", "dim 2 of rank-2 tensors",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3}, d)}, 2);
          },
          {"dim 2", "rank 2"}),
      err("cat", "dim -3 of rank-2 tensors",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3}, d)}, -3);
          },
          {"dim -3", "rank 2"}),
      err("cat", "ranks differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 3, 1}, d)}, 0);
          },
          {"(2, 3, 1)", "(2, 3)"}),
      err("cat", "sizes outside dim differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f32({2, 4}, d)}, 0);
          },
          {"(2, 4)", "(2, 3)"}),
      err("cat", "dtypes differ",
          [](D d) {
            return F::cat({f32({2, 3}, d), f64({2, 3}, d)}, 0);
          },
          {"float64", "float32"}),
      err("cat", "an undefined tensor",
          [](D d) {
            return F::cat({f32({2, 3}, d), kNone}, 0);
          },
          {"tensor 1", "undefined"}),
      err("cat", "0-d tensors",
          [](D d) {
            return F::cat({f32({}, d), f32({}, d)}, 0);
          },
          {"zero-dimensional"}),
      ok("cat", "an empty tensor beside a full one (torch: the full one)",
         [](D d) {
           return F::cat({f32({0, 3}, d), f32({2, 3}, d)}, 0);
         },
         {2, 3}),

      // ---- cross_entropy2d (N, C, H, W) at (N, H, W) ----
      err("cross_entropy2d", "logits of rank 3",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4}, d), i64({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("cross_entropy2d", "target of another size",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 5}, d));
          },
          {"(2, 4, 5)", "(2, 3, 4, 4)"}),
      err("cross_entropy2d", "float32 target",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), f32({2, 4, 4}, d));
          },
          {"target", "float32"}),
      err("cross_entropy2d", "int64 logits",
          [](D d) {
            return F::cross_entropy2d(i64({2, 3, 4, 4}, d), i64({2, 4, 4}, d));
          },
          {"int64"}),
      err("cross_entropy2d", "weight of the wrong size",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f32({2}, d));
          },
          {"weight", "(2,)", "(3,)"}),
      err("cross_entropy2d", "float64 weight with float32 logits",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f64({3}, d));
          },
          {"weight", "float64", "float32"}),
      err_label("cross_entropy2d", "label out of range",
                [](D d) {
                  return F::cross_entropy2d(f32({2, 3, 4, 4}, d), labels_with({2, 4, 4}, 5, 7, d));
                },
                {"label 7", "[0, 3)"}),
      err("cross_entropy2d", "0 classes",
          [](D d) {
            return F::cross_entropy2d(f32({2, 0, 4, 4}, d), i64({2, 4, 4}, d));
          },
          {"(2, 0, 4, 4)"}),
      ok_value(
          "cross_entropy2d", "batch of 0 (torch: NaN)",
          [](D d) { return F::cross_entropy2d(f32({0, 3, 4, 4}, d), i64({0, 4, 4}, d)); }, NAN),
      err("cross_entropy2d", "undefined target",
          [](D d) {
            return F::cross_entropy2d(f32({2, 3, 4, 4}, d), kNone);
          },
          {"undefined"}),
      err("cross_entropy2d", "undefined logits",
          [](D d) {
            return F::cross_entropy2d(kNone, i64({2, 4, 4}, d));
          },
          {"undefined"}),

      // ---- dice_loss (N, C, H, W) at (N, H, W) ----
      err("dice_loss", "logits of rank 2",
          [](D d) {
            return F::dice_loss(f32({2, 3}, d), i64({2}, d));
          },
          {"(2, 3)"}),
      err("dice_loss", "target of another size",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4}, d));
          },
          {"(2, 4)", "(2, 3, 4, 4)"}),
      err("dice_loss", "uint8 target",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), u8({2, 4, 4}, d));
          },
          {"target", "uint8"}),
      err("dice_loss", "weight of the wrong size",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), f32({4}, d));
          },
          {"weight", "(4,)", "(3,)"}),
      err("dice_loss", "smooth -1",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), kNone, 255, -1.0);
          },
          {"smooth -1"}),
      err("dice_loss", "eps 0",
          [](D d) {
            return F::dice_loss(f32({2, 3, 4, 4}, d), i64({2, 4, 4}, d), kNone, 255, 0.0, 0.0);
          },
          {"eps 0"}),
      err_label("dice_loss", "label out of range",
                [](D d) {
                  return F::dice_loss(f32({2, 3, 4, 4}, d), labels_with({2, 4, 4}, 3, 3, d));
                },
                {"label 3", "[0, 3)"}),
      ok_value(
          "dice_loss", "batch of 0 (smp: 0)",
          [](D d) { return F::dice_loss(f32({0, 3, 4, 4}, d), i64({0, 4, 4}, d)); }, 0.0),
      err("dice_loss", "undefined logits",
          [](D d) {
            return F::dice_loss(kNone, i64({2, 4, 4}, d));
          },
          {"undefined"}),

      // ---- argmax over dim 1 of (N, C) ----
      err("argmax", "input of rank 1", [](D d) { return F::argmax(f32({3}, d)); }, {"(3,)"}),
      err("argmax", "input of rank 3",
          [](D d) {
            return F::argmax(f32({2, 3, 4}, d));
          },
          {"(2, 3, 4)"}),
      err("argmax", "int64 input",
          [](D d) {
            return F::argmax(i64({2, 3}, d));
          },
          {"int64"}),
      err("argmax", "0 classes (as torch)",
          [](D d) {
            return F::argmax(f32({2, 0}, d));
          },
          {"(2, 0)"}),
      ok("argmax", "batch of 0 (torch: an empty output)",
         [](D d) {
           return F::argmax(f32({0, 3}, d));
         },
         {0}),
      err("argmax", "undefined input", [](D) { return F::argmax(kNone); }, {"undefined"}),

      // ---- silu, sigmoid, mul (elementwise) ----
      err("silu", "int64 input", [](D d) { return F::silu(i64({2, 3}, d)); }, {"int64", "(2, 3)"}),
      err("silu", "undefined input", [](D) { return F::silu(kNone); }, {"undefined"}),
      ok("silu", "empty input (torch: an empty output)", [](D d) { return F::silu(f32({0, 3}, d)); },
         {0, 3}),
      err("gelu", "int64 input", [](D d) { return F::gelu(i64({2, 3}, d)); }, {"int64", "(2, 3)"}),
      err("gelu", "undefined input", [](D) { return F::gelu(kNone); }, {"undefined"}),
      err("gelu", "unknown approximation",
          [](D d) { return F::gelu(f32({2, 3}, d), "erf"); }, {"'none' or 'tanh'", "'erf'"}),
      ok("gelu", "empty input (torch: an empty output)", [](D d) { return F::gelu(f32({0, 3}, d)); },
         {0, 3}),
      // ---- softmax, bmm, depthwise_conv2d (YOLO11's attention and DWConv) ----
      err("softmax", "int64 input", [](D d) { return F::softmax(i64({2, 3}, d), -1); },
          {"int64", "(2, 3)"}),
      err("softmax", "undefined input", [](D) { return F::softmax(kNone, 0); }, {"undefined"}),
      err("softmax", "dim 2 of a 2-D input", [](D d) { return F::softmax(f32({2, 3}, d), 2); },
          {"dim 2", "(2, 3)", "-2 <= dim < 2"}),
      err("softmax", "dim -3 of a 2-D input", [](D d) { return F::softmax(f32({2, 3}, d), -3); },
          {"dim -3", "-2 <= dim < 2"}),
      ok("softmax", "empty input (torch: an empty output)",
         [](D d) { return F::softmax(f32({0, 3}, d), 1); }, {0, 3}),
      ok("softmax", "a 0-d input (torch: 1)", [](D d) { return F::softmax(f32({}, d), -1); }, {}),
      err("bmm", "a of rank 2", [](D d) { return F::bmm(f32({3, 4}, d), f32({2, 4, 5}, d)); },
          {"3-D", "(3, 4)"}),
      err("bmm", "inner sizes differ",
          [](D d) { return F::bmm(f32({2, 3, 4}, d), f32({2, 5, 6}, d)); },
          {"inner sizes differ", "(2, 3, 4)", "(2, 5, 6)"}),
      err("bmm", "inner sizes differ once a is transposed",
          [](D d) { return F::bmm(f32({2, 3, 4}, d), f32({2, 4, 5}, d), true, false); },
          {"inner sizes differ", "transposed to (2, 4, 3)"}),
      err("bmm", "batch sizes differ",
          [](D d) { return F::bmm(f32({2, 3, 4}, d), f32({3, 4, 5}, d)); }, {"batch sizes differ"}),
      err("bmm", "float64 b with a float32 a",
          [](D d) { return F::bmm(f32({2, 3, 4}, d), f64({2, 4, 5}, d)); },
          {"float64", "float32"}),
      err("bmm", "int64 operands",
          [](D d) { return F::bmm(i64({2, 3, 4}, d), i64({2, 4, 5}, d)); }, {"int64"}),
      err("bmm", "undefined b", [](D d) { return F::bmm(f32({2, 3, 4}, d), kNone); },
          {"undefined"}),
      ok("bmm", "empty inner size (torch: zeros)",
         [](D d) { return F::bmm(f32({2, 3, 0}, d), f32({2, 0, 5}, d)); }, {2, 3, 5}),
      ok("bmm", "empty batch", [](D d) { return F::bmm(f32({0, 3, 4}, d), f32({0, 4, 5}, d)); },
         {0, 3, 5}),
      err("depthwise_conv2d", "weight (C, 2, R, S)",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 2, 3, 3}, d), kNone);
          },
          {"(C, 1, R, S)", "C = 4", "(4, 2, 3, 3)"}),
      err("depthwise_conv2d", "weight channels differ from the input's",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({3, 1, 3, 3}, d), kNone);
          },
          {"(C, 1, R, S)", "(3, 1, 3, 3)"}),
      err("depthwise_conv2d", "input of rank 3",
          [](D d) { return F::depthwise_conv2d(f32({4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone); },
          {"(N, C, H, W)", "(4, 8, 8)"}),
      err("depthwise_conv2d", "bias of the wrong size",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), f32({3}, d));
          },
          {"bias", "(4,)", "(3,)"}),
      err("depthwise_conv2d", "float64 weight with a float32 input",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f64({4, 1, 3, 3}, d), kNone);
          },
          {"float64", "float32"}),
      err("depthwise_conv2d", "int64 input",
          [](D d) {
            return F::depthwise_conv2d(i64({1, 4, 8, 8}, d), i64({4, 1, 3, 3}, d), kNone);
          },
          {"int64"}),
      err("depthwise_conv2d", "stride 0",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone, 0);
          },
          {"stride 0"}),
      err("depthwise_conv2d", "kernel larger than the padded input",
          [](D d) {
            return F::depthwise_conv2d(f32({1, 4, 2, 2}, d), f32({4, 1, 5, 5}, d), kNone);
          },
          {"larger than the padded input"}),
      ok("depthwise_conv2d", "empty batch",
         [](D d) {
           return F::depthwise_conv2d(f32({0, 4, 8, 8}, d), f32({4, 1, 3, 3}, d), kNone, 2, 1);
         },
         {0, 4, 4, 4}),
      err("sigmoid", "uint8 input", [](D d) { return F::sigmoid(u8({4}, d)); }, {"uint8", "(4,)"}),
      err("sigmoid", "undefined input", [](D) { return F::sigmoid(kNone); }, {"undefined"}),
      ok("sigmoid", "empty input (torch: an empty output)",
         [](D d) { return F::sigmoid(f32({2, 0}, d)); }, {2, 0}),
      err("mul", "mismatched shapes",
          [](D d) { return F::mul(f32({2, 3}, d), f32({3, 2}, d)); }, {"(2, 3)", "(3, 2)"}),
      err("mul", "mismatched dtypes",
          [](D d) { return F::mul(f32({2, 3}, d), f64({2, 3}, d)); }, {"float32", "float64"}),
      err("mul", "int64 inputs", [](D d) { return F::mul(i64({2}, d), i64({2}, d)); }, {"int64"}),
      err("mul", "undefined second input", [](D d) { return F::mul(f32({2}, d), kNone); },
          {"undefined"}),

      // ---- narrow ----
      err("narrow", "slice past the end",
          [](D d) { return F::narrow(f32({2, 6, 4}, d), 1, 4, 3); }, {"start 4", "length 3", "(2, 6, 4)"}),
      err("narrow", "negative start",
          [](D d) { return F::narrow(f32({2, 6}, d), 1, -1, 2); }, {"start -1"}),
      err("narrow", "dim out of range",
          [](D d) { return F::narrow(f32({2, 6}, d), 2, 0, 1); }, {"dim 2", "(2, 6)"}),
      err("narrow", "0-d input", [](D d) { return F::narrow(f32({}, d), 0, 0, 1); },
          {"zero-dimensional"}),
      ok("narrow", "length 0 (torch: an empty slice)",
         [](D d) { return F::narrow(f32({2, 6, 4}, d), -2, 6, 0); }, {2, 0, 4}),

      // ---- bce_with_logits ----
      err("bce_with_logits", "target of another shape",
          [](D d) { return F::bce_with_logits(f32({2, 3}, d), f32({3, 2}, d)); },
          {"target", "(2, 3)", "(3, 2)"}),
      err("bce_with_logits", "int64 target",
          [](D d) { return F::bce_with_logits(f32({2, 3}, d), i64({2, 3}, d)); },
          {"target", "int64"}),
      err("bce_with_logits", "int64 logits",
          [](D d) { return F::bce_with_logits(i64({2, 3}, d), i64({2, 3}, d)); }, {"int64"}),
      ok_value("bce_with_logits", "empty input (torch: a sum of 0)",
               [](D d) { return F::bce_with_logits(f32({0, 3}, d), f32({0, 3}, d)); }, 0.0),

      // ---- gather_anchors (B, C, A) at (M,) ----
      err("gather_anchors", "input of rank 2",
          [](D d) { return F::gather_anchors(f32({2, 3}, d), i64({1}, d)); }, {"(2, 3)"}),
      err("gather_anchors", "float index",
          [](D d) { return F::gather_anchors(f32({2, 3, 4}, d), f32({1}, d)); }, {"idx", "float32"}),
      err("gather_anchors", "index past B A",
          [](D) {
            Tensor idx = Tensor::zeros({2}, DType::kInt64);
            idx.data<int64_t>()[1] = 8;
            return F::gather_anchors(f32({2, 3, 4}, cpu_device()), idx);
          },
          {"idx[1] = 8", "(2, 3, 4)"}),
      ok("gather_anchors", "no anchors (an empty result)",
         [](D d) { return F::gather_anchors(f32({2, 3, 4}, d), i64({0}, d)); }, {0, 3}),

      // ---- dfl_expect (N, R) ----
      err("dfl_expect", "input of rank 3",
          [](D d) { return F::dfl_expect(f32({2, 4, 16}, d)); }, {"(2, 4, 16)"}),
      err("dfl_expect", "0 bins", [](D d) { return F::dfl_expect(f32({3, 0}, d)); }, {"(3, 0)"}),
      err("dfl_expect", "int64 input", [](D d) { return F::dfl_expect(i64({3, 16}, d)); },
          {"int64"}),
      ok("dfl_expect", "no rows (an empty result)",
         [](D d) { return F::dfl_expect(f32({0, 16}, d)); }, {0}),

      // ---- ciou_loss (M, 4) ----
      err("ciou_loss", "boxes of 5 values",
          [](D d) { return F::ciou_loss(f32({3, 5}, d), f32({3, 5}, d), f32({3}, d)); },
          {"(3, 5)"}),
      err("ciou_loss", "target of another count",
          [](D d) { return F::ciou_loss(f32({3, 4}, d), f32({2, 4}, d), f32({3}, d)); },
          {"target", "(2, 4)", "(3, 4)"}),
      err("ciou_loss", "float64 weight with float32 boxes",
          [](D d) { return F::ciou_loss(f32({3, 4}, d), f32({3, 4}, d), f64({3}, d)); },
          {"weight", "float64"}),
      ok_value("ciou_loss", "no boxes (a sum of 0)",
               [](D d) { return F::ciou_loss(f32({0, 4}, d), f32({0, 4}, d), f32({0}, d)); }, 0.0),

      // ---- dfl_loss (N, R) at (N,) ----
      err("dfl_loss", "1 bin",
          [](D d) { return F::dfl_loss(f32({3, 1}, d), f32({3}, d), f32({3}, d)); }, {"(3, 1)"}),
      err("dfl_loss", "target of another count",
          [](D d) { return F::dfl_loss(f32({3, 16}, d), f32({4}, d), f32({3}, d)); },
          {"target", "(4,)", "(3,)"}),
      err("dfl_loss", "int64 target",
          [](D d) { return F::dfl_loss(f32({3, 16}, d), i64({3}, d), f32({3}, d)); },
          {"target", "int64"}),
      ok_value("dfl_loss", "no rows (a sum of 0)",
               [](D d) { return F::dfl_loss(f32({0, 16}, d), f32({0}, d), f32({0}, d)); }, 0.0),
  };
  return table;
}

// Runs one row on a device; a failure names the op, the row and what happened instead.
void run_row(const Row& row, Device d) {
  SCOPED_TRACE(std::string(row.op) + ": " + row.what + " on " + d.str());
  std::string caught;  // the hpcnet error's message, or "" when the call returned
  Tensor y;
  try {
    y = row.call(d);
    if (d.is_cuda()) cuda_synchronize(d);  // device-side input errors surface here
  } catch (const Error& e) {               // InputError or Error
    caught = e.what();
    if (caught.empty()) caught = "(empty message)";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "untyped exception (not an hpcnet error): " << e.what();
    return;
  } catch (...) {
    ADD_FAILURE() << "a non-std exception";
    return;
  }
  if (!row.expect_error) {
    ASSERT_TRUE(caught.empty()) << "expected a result, got the error: " << caught;
    ASSERT_TRUE(y.defined()) << "the result is undefined";
    if (row.value) {
      ASSERT_EQ(y.numel(), 1) << "expected a 0-d result, got " << shape_str(y.shape());
      const double v = y.item();
      if (std::isnan(*row.value))
        EXPECT_TRUE(std::isnan(v)) << "expected NaN, got " << v;
      else
        EXPECT_EQ(v, *row.value);
    } else {
      EXPECT_EQ(y.shape(), row.result_shape)
          << "got " << shape_str(y.shape()) << ", expected " << shape_str(row.result_shape);
      EXPECT_TRUE(y.device() == d) << "the result is on " << y.device().str();
    }
    return;
  }
  ASSERT_FALSE(caught.empty()) << "expected an error, the call returned "
                               << (y.defined() ? shape_str(y.shape()) : "an undefined tensor");
  if (!(d.is_cuda() && row.deferred_on_cuda))
    EXPECT_NE(caught.find(row.op), std::string::npos)
        << "the error does not name the op: " << caught;
  for (const std::string& part : row.message)
    EXPECT_NE(caught.find(part), std::string::npos)
        << "the error does not contain '" << part << "': " << caught;
}

void run_op_rows(const std::string& op, Device d) {
  for (const Row& row : rows())
    if (row.op == op) run_row(row, d);
}

// Ops/<op>.ErrorInputsCpu and Ops/<op>.ErrorInputsCuda: the op's rows on each backend (typed
// errors naming the op and the shapes).
const bool kErrorRowsRegistered = [] {
  std::set<std::string> ops;
  for (const Row& row : rows()) ops.insert(row.op);
  for (const std::string& op : ops) {
    test_util::register_op_check(
        op, "ErrorInputsCpu", [op] { run_op_rows(op, cpu_device()); }, __FILE__, __LINE__);
    test_util::register_op_check(
        op, "ErrorInputsCuda",
        [op] {
          if (!cuda_available())
            GTEST_SKIP() << "the CUDA rows need a CUDA device: " << cuda_unavailable_reason();
          run_op_rows(op, cuda_device(0));
        },
        __FILE__, __LINE__);
  }
  return true;
}();

}  // namespace

TEST(OpErrors, EveryOpHasAtLeastThreeRows) {
  std::map<std::string, int> count;
  for (const Row& row : rows()) ++count[row.op];
  std::vector<std::string> names = {"argmax"};  // not differentiable, so not in the op table
  for (const ops::OpRecord* op : op_record::kAll) names.push_back(op->name);
  for (const std::string& op : names)
    EXPECT_GE(count[op], 3) << "op '" << op << "' needs at least 3 rows in test_op_errors.cpp";
  for (const auto& [op, n] : count)
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end())
        << "rows for '" << op << "', which is not in the op table";
}
