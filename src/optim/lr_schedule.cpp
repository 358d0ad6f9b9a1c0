// Learning-rate schedules (see include/hpcnet/optim.h): closed forms of torch's schedulers.
#include <algorithm>
#include <cmath>

#include "hpcnet/optim.h"

namespace hpcnet::optim {

void LrSchedule::validate() const {
  HPCNET_REQUIRE(kind == "constant" || kind == "multistep" || kind == "cosine" ||
                     kind == "onecycle" || kind == "linear",
                 "unknown learning-rate schedule '" + kind +
                     "' (known: constant, multistep, cosine, onecycle, linear)");
  HPCNET_REQUIRE(lrf > 0 && lrf <= 1, "--lrf must be in (0, 1]");
  HPCNET_REQUIRE(warmup_bias_lr >= 0, "--warmup-bias-lr must be >= 0");
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
  if (kind == "linear") return group_lr_at(step, steps_per_epoch, epochs, false);
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

int64_t LrSchedule::linear_warmup_steps(int64_t steps_per_epoch, int64_t epochs) const {
  // Ultralytics 8.4: round(min(warmup_epochs, epochs - 1) x nb); none for a 1-epoch run.
  const int64_t we = std::min<int64_t>(warmup_epochs, std::max<int64_t>(epochs - 1, 0));
  return we > 0 ? we * std::max<int64_t>(steps_per_epoch, 1) : 0;
}

int64_t LrSchedule::accumulate_at(int64_t step, int64_t steps_per_epoch, int64_t epochs,
                                  int64_t nbs, int64_t batch) const {
  if (nbs <= 0) return 1;
  HPCNET_REQUIRE(batch > 0, "accumulate_at: batch must be > 0");
  // The nominal accumulate, at most the run's batch count (std::nearbyint rounds half to even in
  // the default rounding mode, as Python's round() and np.round).
  const int64_t acc0 = std::min<int64_t>(
      std::max<int64_t>(static_cast<int64_t>(
                            std::nearbyint(static_cast<double>(nbs) / static_cast<double>(batch))),
                        1),
      std::max<int64_t>(steps_per_epoch, 1) * std::max<int64_t>(epochs, 1));
  const int64_t nw = kind == "linear" ? linear_warmup_steps(steps_per_epoch, epochs) : 0;
  if (nw == 0 || step >= nw) return acc0;
  // np.interp(ni, [0, nw], [1, acc0]): slope (fp1 - fp0) / (xp1 - xp0), then slope x + fp0.
  const double slope = static_cast<double>(acc0 - 1) / static_cast<double>(nw);
  const double a = slope * static_cast<double>(step) + 1.0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(a)));
}

double LrSchedule::group_lr_at(int64_t step, int64_t steps_per_epoch, int64_t epochs,
                               bool bias_group) const {
  if (kind != "linear") return lr_at(step, steps_per_epoch, epochs);
  steps_per_epoch = std::max<int64_t>(steps_per_epoch, 1);
  const int64_t epoch = step / steps_per_epoch;
  // lf(epoch) = (1 - epoch / epochs) (1 - lrf) + lrf: LambdaLR stepped after each epoch.
  const double target =
      lr * ((1.0 - static_cast<double>(epoch) / static_cast<double>(std::max<int64_t>(epochs, 1))) *
                (1.0 - lrf) +
            lrf);
  const int64_t nw = linear_warmup_steps(steps_per_epoch, epochs);
  if (nw == 0 || step > nw) return target;
  // np.interp(ni, [0, nw], [warmup_bias_lr (the "bias" group) or 0, initial_lr lf(epoch)]).
  const double start = bias_group ? warmup_bias_lr : 0.0;
  return start + (target - start) * static_cast<double>(step) / static_cast<double>(nw);
}

double LrSchedule::momentum_at(int64_t step, int64_t steps_per_epoch, int64_t epochs,
                               double momentum) const {
  const int64_t nw = kind == "linear" ? linear_warmup_steps(steps_per_epoch, epochs) : 0;
  if (nw == 0 || step > nw) return momentum;
  return warmup_momentum + (momentum - warmup_momentum) * static_cast<double>(step) /
                               static_cast<double>(nw);
}

}  // namespace hpcnet::optim
