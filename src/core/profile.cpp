// Storage for the kernel profiler (single-threaded use: kernels are called from one thread).
#include "hpcnet/profile.h"

#include <algorithm>
#include <map>

namespace hpcnet::profile {
namespace {
bool g_enabled = false;
DeviceTimer* g_timer = nullptr;
std::map<std::string, Entry>& table() {
  static std::map<std::string, Entry> t;
  return t;
}
}  // namespace

void enable(bool on) { g_enabled = on; }
void set_device_timer(DeviceTimer* t) { g_timer = t; }
DeviceTimer* device_timer() { return g_timer; }
bool enabled() { return g_enabled; }
void reset() { table().clear(); }

void add(const char* name, double seconds, double flops) {
  Entry& e = table()[name];
  if (e.name.empty()) e.name = name;
  e.calls++;
  e.seconds += seconds;
  e.flops += flops;
}

std::vector<Entry> entries() {
  if (g_timer) g_timer->flush();
  std::vector<Entry> out;
  for (auto& [k, e] : table()) out.push_back(e);
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace hpcnet::profile
