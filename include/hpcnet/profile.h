// A light per-kernel profiler: when enabled, every dispatched kernel call adds its wall time (or
// its time on the device, with a DeviceTimer installed) and floating-point operation count under
// its name. Disabled (the default) it costs one branch.
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

// Times calls on a device instead of the host clock (which only sees a GPU kernel's launch):
// start() marks the device's queue where a call begins and returns a token, stop() where it ends;
// flush() waits for the device and add()s every finished call's time under its name. While one
// is installed, Scope uses it and entries() flushes it first (hpcnet bench --profile on CUDA:
// CUDA events on the device's stream, make_cuda_event_timer in src/core/cuda_device.h).
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual int64_t start() = 0;
  virtual void stop(int64_t token, const char* name, double flops) = 0;
  virtual void flush() = 0;
};
// Installs t (nullptr: the host clock again). The caller keeps it alive while installed.
void set_device_timer(DeviceTimer* t);
DeviceTimer* device_timer();

class Scope {
 public:
  // host_only: work done on the host (always the host clock).
  Scope(const char* name, double flops, bool host_only = false)
      : name_(enabled() ? name : nullptr), flops_(flops) {
    if (!name_) return;
    timer_ = host_only ? nullptr : device_timer();
    if (timer_)
      token_ = timer_->start();
    else
      start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (!name_) return;
    if (timer_)
      timer_->stop(token_, name_, flops_);
    else
      add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
          flops_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  double flops_;
  DeviceTimer* timer_ = nullptr;
  int64_t token_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hpcnet::profile
