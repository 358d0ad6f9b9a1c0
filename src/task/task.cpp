// The task registry (from tasks.inc), the shared evaluation pass and the default inference.
#include "hpcnet/task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hpcnet/autograd.h"
#include "hpcnet/functional.h"

namespace hpcnet::task {

#define HPCNET_TASK(name) std::unique_ptr<Task> make_##name##_task(const TaskOptions&);
#include "src/task/tasks.inc"
#undef HPCNET_TASK

namespace {
using Factory = std::unique_ptr<Task> (*)(const TaskOptions&);
const std::vector<std::pair<std::string, Factory>>& registry() {
#define HPCNET_TASK(name) {#name, &make_##name##_task},
  static const std::vector<std::pair<std::string, Factory>> r = {
#include "src/task/tasks.inc"
  };
#undef HPCNET_TASK
  return r;
}
}  // namespace

std::vector<std::string> task_names() {
  std::vector<std::string> out;
  for (auto& [n, f] : registry()) out.push_back(n);
  return out;
}

std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options) {
  HPCNET_REQUIRE(options.imgsz >= 1, "--imgsz must be at least 1 (got " +
                                         std::to_string(options.imgsz) + ")");
  for (auto& [n, f] : registry())
    if (n == name) return f(options);
  std::string known;
  for (auto& n : task_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown task '" + name + "' (known: " + known + ")");
}

void Task::annotate(data::Image& frame, const Outputs& outputs, int64_t i,
                    const std::vector<std::string>& classes, const PredictOptions& options) const {
  // The line of text at the top left, on a dark band, its size scaling with the frame's.
  const std::string line = predict(outputs, i, classes, options).line;
  const int64_t scale = std::max<int64_t>(1, std::min(frame.height, frame.width) / 240);
  const int64_t band = std::min<int64_t>(frame.height, 10 * scale);
  for (int64_t y = 0; y < band; ++y)
    for (int64_t x = 0; x < frame.width; ++x)
      for (int c = 0; c < 3; ++c) {
        uint8_t& v = frame.pixels[static_cast<size_t>((y * frame.width + x) * 3 + c)];
        v = static_cast<uint8_t>(v / 3);
      }
  data::draw_text(frame.pixels.data(), frame.height, frame.width, scale, scale, line,
                  {255, 255, 255}, scale);
}

Outputs Task::infer(nn::Module& model, const Tensor& images, bool flip_tta) const {
  HPCNET_REQUIRE(!flip_tta, "--tta-flip: the " + name() + " task has no test-time augmentation");
  return model.forward_all(images);
}

void Metric::merge_state(const std::vector<double>& s) {
  std::vector<double> mine = state();
  HPCNET_REQUIRE(s.size() == mine.size(), "metric: merging a state of " + std::to_string(s.size()) +
                                              " numbers into one of " +
                                              std::to_string(mine.size()));
  for (size_t i = 0; i < s.size(); ++i) mine[i] += s[i];
  set_state(mine);
}

std::string Metric::value_text() const {
  char b[96];
  std::snprintf(b, sizeof b, "%s %.2f%%", value_key().c_str(), value());
  return b;
}

void Metric::write_results(const std::string&, const std::vector<int64_t>&,
                           const std::vector<int64_t>&) const {
  throw InputError("this task writes no results file (COCO results are for detection)");
}

double LossSum::mean() const { return count > 0 ? sum / count : std::nan(""); }

std::vector<double> LossSum::part_means() const {
  std::vector<double> m;
  for (double p : parts) m.push_back(count > 0 ? p / count : std::nan(""));
  return m;
}

std::unique_ptr<Metric> evaluate(const Task& task, nn::Module& model, data::DataLoader& loader,
                                 bool flip_tta, LossSum* loss,
                                 const std::function<void(int64_t)>& on_batch) {
  std::unique_ptr<Metric> metric = task.make_metric(loader.dataset().classes());
  const bool was_training = model.is_training();
  const Device device = model.parameters().empty() ? cpu_device() : model.parameters()[0].device();
  model.eval();
  NoGradGuard no_grad;
  loader.begin_epoch(0);
  data::Batch b;
  int64_t batches = 0;
  while (loader.next(b)) {
    Outputs out = task.infer(model, device.is_cpu() ? b.images : b.images.to(device), flip_tta);
    if (loss) {  // where the outputs are, the targets beside them
      data::Batch t = b;
      if (!device.is_cpu()) {
        t.labels = b.labels.to(device);
        if (b.masks.defined()) t.masks = b.masks.to(device);
      }
      loss->sum += task.loss_for_log(task.loss(out, t).item(), b) * static_cast<double>(b.size);
      loss->count += static_cast<double>(b.size);
      const std::vector<double> parts = task.last_loss_parts();
      if (loss->parts.size() < parts.size()) loss->parts.resize(parts.size(), 0.0);
      for (size_t k = 0; k < parts.size(); ++k)
        loss->parts[k] += parts[k] * static_cast<double>(b.size);
    }
    if (!device.is_cpu())
      for (Tensor& t : out) t = t.to(cpu_device());
    metric->add(out, b);
    if (on_batch) on_batch(++batches);
  }
  model.train(was_training);
  return metric;
}

Tensor flip_left_right(const Tensor& x_in) {
  HPCNET_CHECK(x_in.dim() == 4 && x_in.device().is_cpu() &&
                   (x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64),
               "flip_left_right: needs an (N, C, H, W) float tensor on the CPU, got " +
                   shape_str(x_in.shape()));
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const int64_t rows = x.size(0) * x.size(1) * x.size(2), w = x.size(3);
  auto mirror_rows = [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      std::reverse_copy(src + r * w, src + (r + 1) * w, dst + r * w);
  };
  if (x.dtype() == DType::kFloat32)
    mirror_rows(float{});
  else
    mirror_rows(double{});
  return y;
}

}  // namespace hpcnet::task
