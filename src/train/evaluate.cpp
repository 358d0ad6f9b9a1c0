// Evaluation for the loop and the CLI: a task's metric (and loss) over a loader, summed across the
// ranks of a process group; and the classification API of earlier versions (counts, the 32x32
// transform) expressed through the classify task.
#include "src/train/evaluate.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace hpcnet::train {

std::unique_ptr<task::Metric> evaluate_sharded(dist::ProcessGroup& pg, const task::Task& task,
                                               nn::Module& model, data::DataLoader& loader,
                                               task::LossSum* loss_out,
                                               const std::function<void(int64_t)>& on_batch) {
  task::LossSum loss;
  std::unique_ptr<task::Metric> metric =
      task::evaluate(task, model, loader, false, loss_out ? &loss : nullptr, on_batch);
  // Every rank reduces as many parts, whether or not its slice had a batch.
  const size_t num_parts = loss_out ? task.loss_part_names().size() : 0;
  loss.parts.resize(num_parts, 0.0);
  if (pg.world_size() > 1 && !metric->additive()) {
    // A state that does not add up (every detection of a COCO evaluation): each rank's vector is
    // placed at its offset of one zeroed buffer and summed, then merged in rank order.
    const std::vector<double> mine = metric->state();
    const int world = pg.world_size(), rank = pg.rank();
    std::vector<double> lens(static_cast<size_t>(world) + 2, 0.0);
    lens[static_cast<size_t>(rank)] = static_cast<double>(mine.size());
    lens[static_cast<size_t>(world)] = loss.sum;
    lens[static_cast<size_t>(world) + 1] = loss.count;
    lens.insert(lens.end(), loss.parts.begin(), loss.parts.end());
    pg.allreduce_sum(lens.data(), lens.size());
    loss.sum = lens[static_cast<size_t>(world)];
    loss.count = lens[static_cast<size_t>(world) + 1];
    std::copy(lens.begin() + world + 2, lens.end(), loss.parts.begin());
    size_t total = 0, offset = 0;
    for (int k = 0; k < world; ++k) {
      if (k == rank) offset = total;
      total += static_cast<size_t>(lens[static_cast<size_t>(k)]);
    }
    std::vector<double> all(total, 0.0);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(offset));
    pg.allreduce_sum(all.data(), all.size());
    metric->set_state({});
    size_t at = 0;
    for (int k = 0; k < world; ++k) {
      const size_t n = static_cast<size_t>(lens[static_cast<size_t>(k)]);
      metric->merge_state(std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(at),
                                              all.begin() + static_cast<std::ptrdiff_t>(at + n)));
      at += n;
    }
  } else if (pg.world_size() > 1) {
    // One reduction: the metric's state, then the loss sum, its image count and its parts.
    std::vector<double> s = metric->state();
    const size_t n = s.size();
    s.push_back(loss.sum);
    s.push_back(loss.count);
    s.insert(s.end(), loss.parts.begin(), loss.parts.end());
    pg.allreduce_sum(s.data(), s.size());
    loss.sum = s[n];
    loss.count = s[n + 1];
    std::copy(s.begin() + static_cast<std::ptrdiff_t>(n) + 2, s.end(), loss.parts.begin());
    s.resize(n);
    metric->set_state(s);
  }
  if (loss_out) *loss_out = loss;
  return metric;
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader, bool flip_tta) {
  auto t = task::make_task("classify");
  std::unique_ptr<task::Metric> m = task::evaluate(*t, model, loader, flip_tta);
  // The classify metric's state: [correct, total, class_correct[C], class_total[C]].
  const std::vector<double> s = m->state();
  EvalResult r;
  r.classes = loader.dataset().classes();
  const size_t nc = r.classes.size();
  HPCNET_CHECK(s.size() == 2 + 2 * nc, "classify metric state of unexpected size");
  r.correct = static_cast<int64_t>(s[0]);
  r.total = static_cast<int64_t>(s[1]);
  for (size_t c = 0; c < nc; ++c) {
    r.class_correct.push_back(static_cast<int64_t>(s[2 + c]));
    r.class_total.push_back(static_cast<int64_t>(s[2 + nc + c]));
  }
  return r;
}

Tensor flip_left_right(const Tensor& x) { return task::flip_left_right(x); }

data::Compose eval_transform() { return task::make_task("classify", {})->eval_transform(); }

}  // namespace hpcnet::train
