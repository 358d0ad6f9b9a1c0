// The reference interpreter of the export tests (tests/export/onnx_eval.h) on the examples of the
// ONNX operator documentation, worked by hand, and on attributes it does not implement, which
// must be refused rather than ignored.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/export/onnx_eval.h"

namespace hpcnet {
namespace {

using test_util::onnx_eval::eval_node;
using test_util::onnx_eval::Value;

Value floats(std::vector<int64_t> dims, std::vector<float> f) {
  Value v;
  v.dims = std::move(dims);
  v.f = std::move(f);
  return v;
}
Value ints(std::vector<int64_t> i) {
  Value v;
  v.dims = {static_cast<int64_t>(i.size())};
  v.i = std::move(i);
  v.is_int = true;
  return v;
}
Value arange(std::vector<int64_t> dims, float first) {
  Value v = floats(std::move(dims), {});
  for (int64_t k = 0; k < v.numel(); ++k) v.f.push_back(first + static_cast<float>(k));
  return v;
}

onnx::NodeProto node(const std::string& type) {
  onnx::NodeProto n;
  n.set_op_type(type);
  n.add_output("y");
  return n;
}
void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
}
void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
}

void expect_values(const Value& y, const std::vector<int64_t>& dims,
                   const std::vector<float>& want) {
  ASSERT_EQ(y.dims, dims);
  ASSERT_EQ(y.f.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(y.f[k], want[k], 1e-5) << "at " << k;
}

// The message of what eval_node throws ("" when it does not).
std::string refusal(const onnx::NodeProto& n, const std::vector<const Value*>& in) {
  try {
    eval_node(n, in);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// ConvTranspose's example: X = 0..8 (1, 1, 3, 3), W = ones (1, 2, 3, 3): every output is the sum
// of the inputs whose 3x3 footprint covers it, the same in both output channels.
TEST(ExportOnnxEval, ConvTransposeGivesTheSpecificationsExample) {
  const Value x = arange({1, 1, 3, 3}, 0), w = floats({1, 2, 3, 3}, std::vector<float>(18, 1.f));
  const std::vector<float> plane = {0,  1,  3, 3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                    27, 15, 9, 20, 33, 24, 13, 6,  13, 21, 15, 8};
  std::vector<float> want = plane;
  want.insert(want.end(), plane.begin(), plane.end());
  expect_values(eval_node(node("ConvTranspose"), {&x, &w}), {1, 2, 5, 5}, want);
  // Stride 3 down, 2 across, output_padding 1: rows 0-2 hold x's row 0 (0 + 1 overlapping 1 + 2
  // across), the added last row and column only the (absent) bias.
  onnx::NodeProto n = node("ConvTranspose");
  set_ints(n, "strides", {3, 2});
  set_ints(n, "output_padding", {1, 1});
  const Value y = eval_node(n, {&x, &w});
  ASSERT_EQ(y.dims, (std::vector<int64_t>{1, 2, 10, 8}));
  const std::vector<float> row0 = {0, 0, 1, 1, 3, 2, 2, 0}, row6 = {6, 6, 13, 7, 15, 8, 8, 0};
  for (int64_t q = 0; q < 8; ++q) {
    EXPECT_EQ(y.f[static_cast<size_t>(q)], row0[static_cast<size_t>(q)]) << q;
    EXPECT_EQ(y.f[static_cast<size_t>(6 * 8 + q)], row6[static_cast<size_t>(q)]) << q;
    EXPECT_EQ(y.f[static_cast<size_t>(9 * 8 + q)], 0.f) << q;
  }
}

// Resize's example "downsample sizes linear pytorch_half_pixel": 1..16 (1, 1, 4, 4) to
// (1, 1, 3, 1): rows at sources 1/6, 3/2 and 17/6, the column at 0 (length 1).
TEST(ExportOnnxEval, ResizeLinearGivesTheSpecificationsExample) {
  const Value x = arange({1, 1, 4, 4}, 1), sizes = ints({1, 1, 3, 1});
  onnx::NodeProto n = node("Resize");
  set_string(n, "mode", "linear");
  set_string(n, "coordinate_transformation_mode", "pytorch_half_pixel");
  expect_values(eval_node(n, {&x, nullptr, nullptr, &sizes}), {1, 1, 3, 1},
                {1.f + 4.f / 6.f, 7.f, 9.f + 4.f * 5.f / 6.f});
  // half_pixel takes the centre for a length of 1: the column at source 1.5.
  n.mutable_attribute(1)->set_s("half_pixel");
  expect_values(eval_node(n, {&x, nullptr, nullptr, &sizes}), {1, 1, 3, 1},
                {2.5f + 4.f / 6.f, 8.5f, 10.5f + 4.f * 5.f / 6.f});
}

// Pad's example 1: [[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]] with pads [0, 2, 0, 0].
TEST(ExportOnnxEval, PadGivesTheSpecificationsExample) {
  const Value x = floats({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}), pads = ints({0, 2, 0, 0});
  expect_values(eval_node(node("Pad"), {&x, &pads}), {3, 4},
                {0, 0, 1.0f, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f});
}

TEST(ExportOnnxEval, RefusesAttributesAndModesItDoesNotImplement) {
  const Value x = arange({1, 1, 3, 3}, 0), w = floats({1, 2, 3, 3}, std::vector<float>(18, 1.f));
  onnx::NodeProto ct = node("ConvTranspose");
  set_string(ct, "auto_pad", "SAME_UPPER");
  EXPECT_NE(refusal(ct, {&x, &w}).find("ConvTranspose: attribute 'auto_pad'"), std::string::npos);
  onnx::NodeProto shape = node("ConvTranspose");
  set_ints(shape, "output_shape", {6, 6});
  EXPECT_NE(refusal(shape, {&x, &w}).find("attribute 'output_shape'"), std::string::npos);

  const Value sizes = ints({1, 1, 5, 5});
  onnx::NodeProto cubic = node("Resize");
  set_string(cubic, "mode", "cubic");
  EXPECT_NE(refusal(cubic, {&x, nullptr, nullptr, &sizes}).find("mode 'cubic'"), std::string::npos);
  onnx::NodeProto tf = node("Resize");
  set_string(tf, "coordinate_transformation_mode", "tf_crop_and_resize");
  EXPECT_NE(refusal(tf, {&x, nullptr, nullptr, &sizes}).find("tf_crop_and_resize"),
            std::string::npos);

  const Value pads = ints({0, 0, 1, 1, 0, 0, 1, 1});
  onnx::NodeProto reflect = node("Pad");
  set_string(reflect, "mode", "reflect");
  EXPECT_NE(refusal(reflect, {&x, &pads}).find("mode 'reflect'"), std::string::npos);

  onnx::NodeProto gemm = node("Gemm");
  set_ints(gemm, "unknown", {1});
  const Value a = floats({1, 9}, x.f), b = floats({9, 1}, x.f);
  EXPECT_NE(refusal(gemm, {&a, &b}).find("Gemm: attribute 'unknown'"), std::string::npos);
  EXPECT_NE(refusal(node("Elu"), {&x}).find("no evaluator for Elu"), std::string::npos);
}

}  // namespace
}  // namespace hpcnet
