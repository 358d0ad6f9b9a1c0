// Learning-rate schedules against torch.optim.lr_scheduler (tests/golden/schedules.json, written by
// tests/golden/make_schedules.py): |hpcnet - torch| <= 1e-9 (torch's chained cosine form and the
// closed form differ in the last bits).
#include <gtest/gtest.h>

#include "test_paths.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "hpcnet/optim.h"

using namespace hpcnet;

namespace {
const nlohmann::json& golden() {
  static nlohmann::json j = [] {
    std::ifstream f(std::string(HPCNET_SOURCE_DIR) + "/tests/golden/schedules.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
void expect_lrs(const optim::LrSchedule& s, const nlohmann::json& want, int64_t steps_per_epoch,
                int64_t epochs) {
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(s.lr_at(static_cast<int64_t>(i) * steps_per_epoch, steps_per_epoch, epochs),
                want[i].get<double>(), 1e-9)
        << s.kind << " epoch " << i;
}
}  // namespace

TEST(Optim, MultiStepMatchesTorch) {
  const auto& g = golden()["multistep"];
  optim::LrSchedule s;
  s.kind = "multistep";
  s.lr = g["base_lr"];
  s.milestones = g["milestones"].get<std::vector<int64_t>>();
  s.gamma = g["gamma"];
  s.validate();
  expect_lrs(s, g["lrs"], 7, 9);
}

TEST(Optim, CosineMatchesTorch) {
  const auto& g = golden()["cosine"];
  optim::LrSchedule s;
  s.kind = "cosine";
  s.lr = g["base_lr"];
  s.eta_min = g["eta_min"];
  expect_lrs(s, g["lrs"], 3, g["t_max"].get<int64_t>());
  // Within an epoch the rate stays put (per-epoch stepping).
  EXPECT_EQ(s.lr_at(4, 3, 8), s.lr_at(3, 3, 8));
}

TEST(Optim, LinearWarmupMatchesTorch) {
  const auto& g = golden()["linear_warmup"];
  optim::LrSchedule s;
  s.kind = "constant";
  s.lr = g["base_lr"];
  s.warmup_epochs = g["total_iters"];
  s.warmup_start_factor = g["start_factor"];
  expect_lrs(s, g["lrs"], 5, 7);
}

TEST(Optim, OneCycleMatchesTorchPerStep) {
  const auto& g = golden()["onecycle"];
  optim::LrSchedule s;
  s.kind = "onecycle";
  s.lr = g["max_lr"];
  s.pct_start = g["pct_start"];
  s.div_factor = g["div_factor"];
  s.final_div_factor = g["final_div_factor"];
  const auto& want = g["lrs"];
  // total_steps 20 = 4 epochs of 5 steps.
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(s.lr_at(static_cast<int64_t>(i), 5, 4), want[i].get<double>(), 1e-9) << i;
}

TEST(Optim, BadSchedulesAreInputErrors) {
  optim::LrSchedule s;
  s.kind = "triangle";
  EXPECT_THROW(s.validate(), InputError);
  s.kind = "multistep";
  s.milestones = {5, 3};
  EXPECT_THROW(s.validate(), InputError);
  s = optim::LrSchedule();
  s.kind = "onecycle";
  s.warmup_epochs = 2;
  EXPECT_THROW(s.validate(), InputError);
}
