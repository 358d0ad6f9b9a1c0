// hpcnet's default OpenMP wait (omp_wait.h): decided from the environment, applied by executing the
// program again with it, since libgomp has read the environment before main runs.
#include "src/ops/omp_wait.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace hpcnet::ops {

namespace {

// Whether the user chose how libgomp waits (either variable set, even empty): that choice stands.
bool user_chose(const std::function<const char*(const char*)>& get) {
  return get("OMP_WAIT_POLICY") || get("GOMP_SPINCOUNT");
}

// /proc/stat's first line: busy and total jiffies over all cores; false when unreadable.
bool cpu_jiffies(uint64_t* busy, uint64_t* total) {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                            &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (n < 4) return false;
  // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
  *total = 0;
  for (unsigned long long x : v) *total += x;
  *busy = *total - v[3] - v[4];
  return true;
}

}  // namespace

double busy_cores(int ms) {
  uint64_t b0 = 0, t0 = 0, b1 = 0, t1 = 0;
  if (!cpu_jiffies(&b0, &t0)) return -1;
  ::usleep(static_cast<useconds_t>(ms) * 1000);
  if (!cpu_jiffies(&b1, &t1) || t1 <= t0) return -1;
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<double>(b1 - b0) / static_cast<double>(t1 - t0) *
         static_cast<double>(cores > 0 ? cores : 1);
}

std::vector<std::pair<std::string, std::string>> omp_wait_defaults(
    const std::function<const char*(const char*)>& get, double busy) {
  if (user_chose(get)) return {};
  if (busy >= kBusyCores) return {{"OMP_WAIT_POLICY", "passive"}};
  return {{"GOMP_SPINCOUNT", kOmpSpinCount}};
}

void apply_omp_wait_defaults(char** argv) {
  const std::function<const char*(const char*)> get = [](const char* n) { return std::getenv(n); };
  if (user_chose(get)) return;  // no sampling: the user chose
  const auto missing = omp_wait_defaults(get, busy_cores(50));
  for (const auto& [name, value] : missing) ::setenv(name.c_str(), value.c_str(), 0);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with libgomp's default
}

}  // namespace hpcnet::ops
