// Learning-rate schedules (see include/hpcnet/optim.h): closed forms of torch's schedulers.
#include <algorithm>
#include <cmath>

#include "hpcnet/optim.h"

namespace hpcnet::optim {

void LrSchedule::validate() const {
  HPCNET_REQUIRE(kind == "constant" || kind == "multistep" || kind == "cosine" || kind == "onecycle",
                 "unknown learning-rate schedule '" + kind +
                     "' (known: constant, multistep, cosine, onecycle)");
  HPCNET_REQUIRE(std::isfinite(lr) && lr >= 0, "learning rate must be >= 0");
  HPCNET_REQUIRE(gamma > 0, "--lr-gamma must be > 0");
  HPCNET_REQUIRE(eta_min >= 0, "--lr-min must be >= 0");
  HPCNET_REQUIRE(warmup_epochs >= 0, "--warmup-epochs must be >= 0");
  HPCNET_REQUIRE(warmup_start_factor > 0 && warmup_start_factor <= 1,
                 "warm-up start factor must be in (0, 1]");
  HPCNET_REQUIRE(pct_start > 0 && pct_start < 1, "onecycle pct_start must be in (0, 1)");
  HPCNET_REQUIRE(div_factor > 0 && final_div_factor > 0, "onecycle div factors must be > 0");
  HPCNET_REQUIRE(kind != "onecycle" || warmup_epochs == 0,
                 "onecycle has its own warm-up; drop --warmup-epochs");
  for (size_t i = 0; i < milestones.size(); ++i)
    HPCNET_REQUIRE(milestones[i] > 0 && (i == 0 || milestones[i] > milestones[i - 1]),
                   "--milestones must be increasing positive epochs");
}

double LrSchedule::lr_at(int64_t step, int64_t steps_per_epoch, int64_t epochs) const {
  steps_per_epoch = std::max<int64_t>(steps_per_epoch, 1);
  if (kind == "onecycle") {
    // torch.optim.lr_scheduler.OneCycleLR with two phases and cosine annealing.
    const double total = static_cast<double>(std::max<int64_t>(epochs * steps_per_epoch, 2));
    const double initial = lr / div_factor, min_lr = initial / final_div_factor;
    const double end1 = pct_start * total - 1, end2 = total - 1;
    auto cos_anneal = [](double start, double end, double pct) {
      return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
    };
    double s = static_cast<double>(step);
    if (s <= end1) return cos_anneal(initial, lr, s / end1);
    return cos_anneal(lr, min_lr, std::min(1.0, (s - end1) / (end2 - end1)));
  }
  int64_t epoch = step / steps_per_epoch;
  if (epoch < warmup_epochs) {
    // LinearLR(start_factor, 1.0, total_iters = warmup_epochs), stepped per epoch.
    double f = warmup_start_factor + (1.0 - warmup_start_factor) * epoch / warmup_epochs;
    return lr * f;
  }
  epoch -= warmup_epochs;
  if (kind == "multistep") {
    int64_t passed = std::count_if(milestones.begin(), milestones.end(),
                                   [&](int64_t m) { return m <= epoch; });
    return lr * std::pow(gamma, static_cast<double>(passed));
  }
  if (kind == "cosine") {
    double t_max = static_cast<double>(std::max<int64_t>(epochs - warmup_epochs, 1));
    return eta_min + (lr - eta_min) * (1 + std::cos(M_PI * epoch / t_max)) / 2;
  }
  return lr;
}

}  // namespace hpcnet::optim
