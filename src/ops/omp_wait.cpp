// hpcnet's default OpenMP wait (omp_wait.h): decided from the environment, applied by executing the
// program again with it, since libgomp has read the environment before main runs.
#include "src/ops/omp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace hpcnet::ops {

std::vector<std::pair<std::string, std::string>> omp_wait_defaults(
    const std::function<const char*(const char*)>& get) {
  if (get("OMP_WAIT_POLICY") || get("GOMP_SPINCOUNT")) return {};
  return {{"GOMP_SPINCOUNT", kOmpSpinCount}};
}

void apply_omp_wait_defaults(char** argv) {
  const auto missing = omp_wait_defaults([](const char* n) { return std::getenv(n); });
  if (missing.empty()) return;
  for (const auto& [name, value] : missing) ::setenv(name.c_str(), value.c_str(), 0);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with libgomp's default
}

}  // namespace hpcnet::ops
