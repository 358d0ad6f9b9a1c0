// `hpcnet bench`: steady-state training steps on synthetic data, timed per step and per kernel.
#include <sys/resource.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "hpcnet/functional.h"
#include "hpcnet/profile.h"
#include "hpcnet/rng.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "src/core/cuda_device.h"
#include "src/ops/ops.h"

namespace hpcnet::train {

double peak_fp32_gflops(int threads, std::string* how) {
  double mhz = 0;
  bool avx512 = false;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(line.find(':') + 1));
    if (line.rfind("flags", 0) == 0 && line.find(" avx512f") != std::string::npos) avx512 = true;
  }
  int lanes = avx512 ? 16 : 8;
  double peak = threads * 2.0 * lanes * 2.0 * mhz / 1000.0;
  if (how) {
    std::ostringstream os;
    os << threads << " cores x 2 FMA units x " << lanes << " fp32 lanes x 2 flop x "
       << mhz / 1000.0 << " GHz";
    *how = os.str();
  }
  return peak;
}

LoaderBenchResult run_loader_bench(const BenchConfig& cfg) {
  HPCNET_REQUIRE(!cfg.data.empty(), "bench --loader: --data DIR is required");
  HPCNET_REQUIRE(cfg.batch_size >= 1 && cfg.epochs >= 1 && cfg.workers >= 0,
                 "bench --loader: --batch-size and --epochs must be positive, --workers >= 0");
  using clock = std::chrono::steady_clock;
  LoaderBenchResult r;
  const auto t0 = clock::now();
  task::TaskOptions o;
  o.imgsz = cfg.imgsz > 0 ? cfg.imgsz : 224;
  o.augment = task_augment(cfg.augment);
  const std::unique_ptr<task::Task> task = task::make_task("classify", o);
  std::shared_ptr<data::Dataset> ds = data::open_dataset(cfg.dataset, cfg.data, "train");
  data::set_decode_min_side(*ds, task->decode_min_side());
  data::CacheOptions co{cfg.cache, "", cfg.threads};
  co.resize = task->train_transform().leading_resize();
  data::CachedDataset cached = data::cache_dataset(ds, co);
  r.cache_line = cached.line;
  r.start_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  data::DataLoaderOptions lo;
  lo.batch_size = cfg.batch_size;
  lo.shuffle = true;
  lo.num_workers = cfg.workers;
  lo.prefetch_factor = cfg.workers > 0 ? std::max<int64_t>(2, 16 / cfg.workers) : 2;
  data::Compose tf = task->train_transform();
  r.transform = tf.str();
  data::DataLoader loader(cached.dataset, std::move(tf), lo);
  for (int64_t e = 0; e < cfg.epochs; ++e) {
    const auto te = clock::now();
    loader.begin_epoch(e);
    data::Batch b;
    r.images = 0;
    while (loader.next(b)) r.images += b.size;
    r.seconds = std::chrono::duration<double>(clock::now() - te).count();
  }
  r.images_per_sec = r.seconds > 0 ? static_cast<double>(r.images) / r.seconds : 0;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  r.peak_rss_mb = static_cast<double>(u.ru_maxrss) / 1024.0;
  return r;
}

namespace {

// Eight distinct synthetic batches, cycled by the timed steps: normal images, random labels,
// masks of random classes (segment), 3 to 4 boxes of 8 pixels or more per image (detect), on
// `dev` as the training loop moves them (boxes stay on the host).
std::vector<data::Batch> synthetic_batches(int64_t batch_size, int64_t imgsz, int64_t kClasses,
                                           data::TargetKind kind, Device dev) {
  Rng rng(1);
  std::vector<data::Batch> batches;
  for (int i = 0; i < 8; ++i) {
    data::Batch b;
    b.size = batch_size;
    b.images = Tensor::empty({batch_size, 3, imgsz, imgsz});
    float* p = b.images.data<float>();
    for (int64_t k = 0; k < b.images.numel(); ++k) p[k] = static_cast<float>(rng.normal());
    std::vector<int64_t> labels(batch_size);
    for (auto& l : labels) l = static_cast<int64_t>(rng.randint(kClasses));
    b.labels = Tensor::from_labels(labels);
    if (kind == data::TargetKind::kMask) {
      b.masks = Tensor::empty({batch_size, imgsz, imgsz}, DType::kInt64);
      int64_t* m = b.masks.data<int64_t>();
      for (int64_t k = 0; k < b.masks.numel(); ++k) m[k] = static_cast<int64_t>(rng.randint(kClasses));
    }
    if (kind == data::TargetKind::kBoxes) {
      b.boxes.resize(static_cast<size_t>(batch_size));
      for (auto& list : b.boxes)
        for (uint64_t k = 0, n = 3 + rng.randint(2); k < n; ++k) {
          const float w = 8 + static_cast<float>(rng.randint(static_cast<uint64_t>(imgsz / 2)));
          const float h = 8 + static_cast<float>(rng.randint(static_cast<uint64_t>(imgsz / 2)));
          const float x = static_cast<float>(rng.randint(static_cast<uint64_t>(imgsz - w)));
          const float y = static_cast<float>(rng.randint(static_cast<uint64_t>(imgsz - h)));
          list.push_back({static_cast<int64_t>(rng.randint(kClasses)), x, y, x + w, y + h});
        }
    }
    if (!dev.is_cpu()) {
      b.images = b.images.to(dev);
      b.labels = b.labels.to(dev);
      if (b.masks.defined()) b.masks = b.masks.to(dev);
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

}  // namespace

BenchResult run_bench(const BenchConfig& cfg) {
  HPCNET_REQUIRE(cfg.batch_size >= 1 && cfg.steps >= 1 && cfg.warmup >= 0,
                 "bench: --batch-size and --steps must be positive");
  ops::set_num_threads(cfg.threads);
  const Device dev = resolve_device(cfg.device);
  HPCNET_REQUIRE(!cfg.cuda_graph || !dev.is_cpu(), "bench: --cuda-graph needs --device cuda");
  apply_precision(cfg.precision, dev);
  apply_conv_algorithm(cfg.conv_algorithm);
  apply_cuda_math(cfg.tf32, cfg.deterministic);
  const nn::ModelInfo& info = nn::model_info(cfg.model);
  const int64_t imgsz = cfg.imgsz > 0 ? cfg.imgsz : info.imgsz;
  HPCNET_REQUIRE(!info.fixed_size || imgsz == info.imgsz,
                 "bench: " + cfg.model + " takes " + std::to_string(info.imgsz) + "x" +
                     std::to_string(info.imgsz) + " images only");
  task::TaskOptions topt;
  topt.imgsz = imgsz;
  const std::unique_ptr<task::Task> task = task::make_task(info.task, topt);
  const int64_t kClasses = task->target_kind() == data::TargetKind::kMask ? 11 : 10;
  manual_seed(0);
  auto model = nn::make_model(cfg.model, nn::ModelOptions{kClasses});
  model->to_(dev);
  optim::SGD opt(model->named_parameters(), {0.001, 0.9, 0, 0, false});
  const std::vector<data::Batch> batches =
      synthetic_batches(cfg.batch_size, imgsz, kClasses, task->target_kind(), dev);
  // No read of the loss: on CUDA a step queues its work and returns; the timed loop waits for the
  // device once, at its end.
  auto step_on = [&](const data::Batch& b) {
    opt.zero_grad();
    Tensor loss = task->loss(model->forward_all(b.images), b);
    loss.backward();
    opt.step();
  };
  auto eager = [&](int64_t i) { step_on(batches[static_cast<size_t>(i % 8)]); };
  auto sync = [&] {
    if (!dev.is_cpu()) cuda_synchronize(dev);
  };
  for (int64_t i = 0; i < std::max<int64_t>(cfg.warmup, cfg.cuda_graph ? 2 : 0); ++i) eager(i);
  sync();
  // --cuda-graph: one step captured on a batch of its own, whose buffers each replay reads.
  CudaGraph graph;
  data::Batch fixed;
  BenchResult r;
  // (detect packs its targets on the host each step, which a replay would not redo)
  const bool graphable = task->loss_part_names().empty();
  if (cfg.cuda_graph && !graphable)
    std::fprintf(stderr, "hpcnet bench: --cuda-graph: not for %s (its targets are packed on the "
                 "host each step); timing eager steps\n", cfg.model.c_str());
  if (cfg.cuda_graph && graphable) {
    const data::Batch& b0 = batches[0];
    fixed.size = b0.size;
    fixed.images = b0.images.clone();
    fixed.labels = b0.labels.clone();
    if (b0.masks.defined()) fixed.masks = b0.masks.clone();
    fixed.boxes = b0.boxes;
    r.cuda_graph = graph.capture(dev, [&] { step_on(fixed); });
    if (!r.cuda_graph)
      std::fprintf(stderr, "hpcnet bench: --cuda-graph: the step could not be captured (%s); "
                   "timing eager steps\n", graph.why().c_str());
  }
  const bool per_kernel = cfg.profile && !r.cuda_graph;  // a replay runs no host code to time
  auto step = [&](int64_t i) {
    if (!graph.captured()) return eager(i);
    const data::Batch& b = batches[static_cast<size_t>(i % 8)];
    fixed.images.copy_(b.images);  // queued device-to-device copies, then the graph
    fixed.labels.copy_(b.labels);
    if (b.masks.defined()) fixed.masks.copy_(b.masks);
    graph.replay();
  };
  auto alloc_stats = [&] {
    return dev.is_cpu() ? cpu_allocator_stats() : cuda_allocator_stats(dev.index);
  };
  uint64_t allocs0 = alloc_stats().system_allocs;
  // On CUDA the kernels' times come from CUDA events around each call on the stream (the host
  // clock would time the launches).
  std::unique_ptr<profile::DeviceTimer> timer;
  if (per_kernel && dev.is_cuda()) timer = make_cuda_event_timer(dev);
  struct TimerGuard {  // uninstalled on every way out
    ~TimerGuard() { profile::set_device_timer(nullptr); }
  } timer_guard;
  profile::set_device_timer(timer.get());
  profile::reset();
  profile::enable(true);  // flop counts always; per-kernel times only when per_kernel
  auto t0 = std::chrono::steady_clock::now();
  if (!per_kernel) profile::enable(false);
  for (int64_t i = 0; i < cfg.steps; ++i) step(i);
  sync();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  profile::enable(false);
  r.seconds_per_step = secs / cfg.steps;
  r.images_per_sec = cfg.batch_size / r.seconds_per_step;
  r.system_allocs_per_step = (alloc_stats().system_allocs - allocs0) / cfg.steps;
  {
    const AllocatorStats a = alloc_stats();
    r.allocator_peak_mb = static_cast<double>(a.peak_bytes_in_use) / (1 << 20);
    r.allocator_held_mb = static_cast<double>(a.bytes_in_use + a.bytes_cached) / (1 << 20);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    r.peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024;  // Linux: KiB
  }
  if (!per_kernel) {
    // One profiled step for the flop count.
    profile::reset();
    profile::enable(true);
    eager(0);
    sync();
    profile::enable(false);
  }
  int64_t div = per_kernel ? cfg.steps : 1;
  for (auto& e : profile::entries()) {  // (flushes the timer)
    r.flops_per_step += e.flops / div;
    if (per_kernel)
      r.kernels.push_back({e.name, {1000.0 * e.seconds / div, static_cast<double>(e.calls) / div,
                                    e.seconds > 0 ? e.flops / e.seconds / 1e9 : 0.0}});
  }
  r.gflops = r.flops_per_step / r.seconds_per_step / 1e9;
  r.peak_gflops = dev.is_cpu() ? peak_fp32_gflops(ops::get_num_threads()) : 0;
  return r;
}

}  // namespace hpcnet::train
