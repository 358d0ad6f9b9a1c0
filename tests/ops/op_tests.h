// One gtest per op and kind of check, named Ops/<op>.<Check> (ggml's test-backend-ops -o OP), so
// that `ctest -R 'Ops/silu\.'` runs silu's checks and nothing else, and one op's failure does not
// hide another's. tests/ops/op_checks.cpp registers each op's checks here at start-up, from the
// op's test cases (src/ops/op_cases.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>

namespace hpcnet::test_util {

class OpCheck : public testing::Test {
 public:
  explicit OpCheck(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

// Registers the test Ops/<op>.<check> running body (call before RUN_ALL_TESTS, e.g. from a
// namespace-scope initializer).
inline void register_op_check(const std::string& op, const std::string& check,
                              std::function<void()> body, const char* file, int line) {
  testing::RegisterTest(("Ops/" + op).c_str(), check.c_str(), nullptr, nullptr, file, line,
                        [body]() -> testing::Test* { return new OpCheck(body); });
}

}  // namespace hpcnet::test_util
