// Evaluation inside the training loop: a task's metric over this rank's loader, summed over the
// ranks of the process group (each rank evaluates its own slice; the metric's state adds up).
#pragma once

#include <memory>

#include "hpcnet/dist.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"

namespace hpcnet::train {

// With loss, *loss is set to the task's loss (and its parts, task.loss_part_names().size() of
// them, even on a rank without batches) summed over every rank's slice, with the metric's state.
std::unique_ptr<task::Metric> evaluate_sharded(dist::ProcessGroup& pg, const task::Task& task,
                                               nn::Module& model, data::DataLoader& loader,
                                               task::LossSum* loss = nullptr,
                                               const std::function<void(int64_t)>& on_batch = {});

}  // namespace hpcnet::train
