// Evaluation inside the training loop: a task's metric over this rank's loader, summed over the
// ranks of the process group (each rank evaluates its own slice; the metric's state adds up).
#pragma once

#include <memory>

#include "hpcnet/dist.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"

namespace hpcnet::train {

// With mean_loss, *mean_loss is set to the task's loss per image over every rank's slice
// (task::LossSum, summed across ranks with the metric's state).
std::unique_ptr<task::Metric> evaluate_sharded(dist::ProcessGroup& pg, const task::Task& task,
                                               nn::Module& model, data::DataLoader& loader,
                                               double* mean_loss = nullptr,
                                               const std::function<void(int64_t)>& on_batch = {});

}  // namespace hpcnet::train
