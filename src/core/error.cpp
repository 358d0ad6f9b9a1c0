// Out-of-line throwers behind HPCNET_CHECK and HPCNET_REQUIRE, so the macros stay small.
#include "hpcnet/error.h"

namespace hpcnet::detail {

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(msg + " (check `" + cond + "` failed at " + file + ":" + std::to_string(line) + ")");
}

void throw_input_error(const std::string& msg) { throw InputError(msg); }

}  // namespace hpcnet::detail
