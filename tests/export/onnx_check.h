// Reading an exported ONNX file back through the ONNX library (onnx_proto parses it,
// onnx::checker and strict shape inference check it), for the export tests and the ops' ONNX
// round trips (tests/ops/op_checks.cpp).
#pragma once

#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hpcnet::test_util {

inline onnx::ModelProto read_model(const std::filesystem::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

inline std::vector<std::string> op_types(const onnx::ModelProto& m) {
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node()) ops.push_back(n.op_type());
  return ops;
}

inline int count(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<int>(std::count(v.begin(), v.end(), s));
}

// Runs the checker with strict shape inference; "" when the model passes.
inline std::string check(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions{true, 1, true});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace hpcnet::test_util
