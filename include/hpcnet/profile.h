// A light per-kernel profiler: when enabled, every dispatched kernel call adds its wall time and
// floating-point operation count under its name. Disabled (the default) it costs one branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hpcnet::profile {

struct Entry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
};

void enable(bool on);
bool enabled();
void reset();
std::vector<Entry> entries();  // sorted by time, largest first

void add(const char* name, double seconds, double flops);

class Scope {
 public:
  Scope(const char* name, double flops) : name_(enabled() ? name : nullptr), flops_(flops) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_)
      add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
          flops_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  double flops_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hpcnet::profile
