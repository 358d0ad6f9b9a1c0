// Typed errors for hpcnet. InputError is the user's to fix (bad argument, missing or broken file:
// the CLI exits with 2); Error is a failure while running (exit 1). Messages are one line and say
// what went wrong, where, and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace hpcnet {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad usage or bad input: an argument out of range, a missing/truncated/corrupt file.
class InputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond,
                                      const std::string& msg);
[[noreturn]] void throw_input_error(const std::string& msg);
}  // namespace detail

}  // namespace hpcnet

// Internal invariant: a bug in hpcnet or in the caller's use of the C++ API.
#define HPCNET_CHECK(cond, msg)                                                 \
  do {                                                                          \
    if (!(cond)) ::hpcnet::detail::throw_check_failure(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// User-facing validation: throws InputError with the message alone.
#define HPCNET_REQUIRE(cond, msg)                                \
  do {                                                           \
    if (!(cond)) ::hpcnet::detail::throw_input_error((msg));     \
  } while (0)
