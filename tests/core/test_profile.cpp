// The profiler's device timer hook: with a DeviceTimer installed, Scope brackets each call with
// the timer's start/stop (the calls' device time, not the host's launch time), host-only scopes
// keep the host clock, entries() flushes the timer first, and nothing is timed while disabled.
// The CUDA event timer itself (make_cuda_event_timer) runs only on a GPU: Cuda* test below.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hpcnet/profile.h"
#include "src/core/cuda_device.h"

namespace hpcnet {
namespace {

// Records what Scope asks of it; flush() adds each finished call with a fixed 2 ms.
struct FakeTimer : profile::DeviceTimer {
  std::vector<std::string> log;
  std::vector<std::pair<const char*, double>> open;
  int64_t start() override {
    log.push_back("start");
    open.push_back({nullptr, 0});
    return static_cast<int64_t>(open.size()) - 1;
  }
  void stop(int64_t token, const char* name, double flops) override {
    log.push_back("stop " + std::to_string(token) + " " + name);
    open.at(static_cast<size_t>(token)) = {name, flops};
  }
  void flush() override {
    log.push_back("flush");
    for (auto& [name, flops] : open) profile::add(name, 0.002, flops);
    open.clear();
  }
};

struct ProfileState {
  ProfileState() {
    profile::reset();
    profile::enable(true);
  }
  ~ProfileState() {
    profile::set_device_timer(nullptr);
    profile::enable(false);
    profile::reset();
  }
};

const profile::Entry* find(const std::vector<profile::Entry>& es, const std::string& name) {
  for (const auto& e : es)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(Profile, ADeviceTimerBracketsEachCallAndIsFlushedByEntries) {
  ProfileState state;
  FakeTimer timer;
  profile::set_device_timer(&timer);
  EXPECT_EQ(profile::device_timer(), &timer);
  {
    profile::Scope outer("conv", 100);
    profile::Scope inner("relu", 5);
  }
  { profile::Scope host("assign (host)", 0, true); }
  EXPECT_EQ(timer.log, (std::vector<std::string>{"start", "start", "stop 1 relu", "stop 0 conv"}));
  const std::vector<profile::Entry> es = profile::entries();
  EXPECT_EQ(timer.log.back(), "flush");
  const profile::Entry* conv = find(es, "conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->calls, 1);
  EXPECT_DOUBLE_EQ(conv->seconds, 0.002);
  EXPECT_DOUBLE_EQ(conv->flops, 100);
  const profile::Entry* host = find(es, "assign (host)");  // the host clock, not the timer
  ASSERT_NE(host, nullptr);
  EXPECT_LT(host->seconds, 0.002);
  EXPECT_EQ(timer.log.size(), 5u);

  profile::set_device_timer(nullptr);
  { profile::Scope plain("pool", 1); }
  EXPECT_EQ(timer.log.size(), 5u);  // uninstalled: not asked
  EXPECT_NE(find(profile::entries(), "pool"), nullptr);
}

TEST(Profile, NothingIsTimedWhileDisabled) {
  ProfileState state;
  FakeTimer timer;
  profile::set_device_timer(&timer);
  profile::enable(false);
  { profile::Scope s("conv", 1); }
  EXPECT_TRUE(timer.log.empty());
}

// The CUDA event timer on a GPU: a device fill's time is read back under its name.
TEST(Profile, CudaEventTimerTimesACallOnTheStream) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  ProfileState state;
  const Device gpu = cuda_device(0);
  auto timer = make_cuda_event_timer(gpu);
  profile::set_device_timer(timer.get());
  Tensor t = Tensor::empty({1 << 20}, DType::kFloat32, gpu);
  for (int i = 0; i < 3; ++i) {
    profile::Scope s("fill", 0);
    t.fill_(1.0);
  }
  const std::vector<profile::Entry> es = profile::entries();
  const profile::Entry* fill = find(es, "fill");
  ASSERT_NE(fill, nullptr);
  EXPECT_EQ(fill->calls, 3);
  EXPECT_GT(fill->seconds, 0);
  EXPECT_LT(fill->seconds, 1);
  EXPECT_THROW(make_cuda_event_timer(cpu_device()), Error);
}

}  // namespace
}  // namespace hpcnet
