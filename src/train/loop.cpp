// The training loop behind `hpcnet train`: the tutorial's program (data -> model -> the task's
// loss -> backward -> SGD, loss lines every log_every mini-batches), plus checkpoints after every
// epoch, exact resume, metrics (run_metrics.cpp: jsonl, csv, TensorBoard) and a progress bar on
// terminals; data-parallel over the ranks of dist::world() (DistributedSampler shares, bucketed
// gradient all-reduce, rank 0 writes). What a target is, the loop leaves to the task; the recipe
// is recipe.cpp's, the run files checkpoint.cpp's.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>

#include "hpcnet/dist.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "hpcnet/shards.h"
#include "hpcnet/train.h"
#include "src/ops/ops.h"
#include "src/train/checkpoint.h"
#include "src/train/evaluate.h"
#include "src/train/progress.h"
#include "src/train/run_lock.h"
#include "src/train/run_metrics.h"

namespace fs = std::filesystem;

namespace hpcnet::train {
namespace {

struct Data {
  std::shared_ptr<const data::Dataset> train, val;
  std::vector<std::string> classes;
  std::vector<std::string> notes;  // what --cache chose for each split, and why
  nlohmann::json record;           // TrainState::data: where the data is and what it holds
};

// A split of --data (open_dataset's), where detection's report goes to stderr and a training split
// without a single object is refused: there is nothing to learn from (Ultralytics: "No labels
// found"), and the run would end at mAP 0 without a word.
std::shared_ptr<data::Dataset> open_split(const TrainConfig& c, const std::string& split) {
  // Shards are read by the factory whatever --dataset says (a detect model's default "detect").
  if (c.dataset != "detect" || data::is_webdataset_path(c.data))
    return data::open_dataset(c.dataset, c.data, split);
  data::DetectionData d = data::load_detection_dataset(c.data, split);
  if (const std::string none = d.report.no_objects(); !none.empty() && split == "train")
    throw InputError(none + "; there is nothing to train on");
  for (const std::string& line : d.report.lines()) std::fprintf(stderr, "%s\n", line.c_str());
  return d.dataset;
}

// open_split, done once per job: with several ranks, rank 0 walks the folder (or reads the JSON,
// or indexes the archive) and broadcasts the index; the other ranks rebuild the dataset from it
// without listing a folder (on a parallel file system millions of stats and directory reads per
// rank matter). A dataset held in memory (CIFAR-10's batches) is read by each rank, as before.
// When rank 0 cannot open the data every rank fails, rank 0 with the reason.
// Lifts the group's timeout for the collectives of its scope, which wait on slow I/O (a folder
// walk, a download) rather than on a failed rank, and restores it on every way out.
class UntimedCollectives {
 public:
  explicit UntimedCollectives(dist::ProcessGroup& pg) : pg_(pg), saved_(pg.timeout()) {
    pg_.set_timeout(0);
  }
  ~UntimedCollectives() { pg_.set_timeout(saved_); }
  UntimedCollectives(const UntimedCollectives&) = delete;
  UntimedCollectives& operator=(const UntimedCollectives&) = delete;

 private:
  dist::ProcessGroup& pg_;
  double saved_;
};

std::shared_ptr<data::Dataset> open_split_once(const TrainConfig& c, const std::string& split,
                                               dist::ProcessGroup& pg,
                                               std::vector<std::string>& notes) {
  if (pg.world_size() == 1) return open_split(c, split);
  constexpr uint64_t kFailed = ~uint64_t{0};
  std::shared_ptr<data::Dataset> ds;
  std::string bytes;
  uint64_t size = 0;
  {
    const UntimedCollectives untimed(pg);  // walking a large folder takes as long as it takes
    if (pg.rank() == 0) {
      try {
        ds = open_split(c, split);
        bytes = data::dataset_index_bytes(*ds);
        size = bytes.size();
      } catch (...) {
        size = kFailed;
        pg.broadcast(&size, sizeof size, 0);
        throw;
      }
    }
    pg.broadcast(&size, sizeof size, 0);
    if (size == kFailed)
      throw InputError("--data " + c.data + ": rank 0 could not open its " + split +
                       " split (its message says why)");
    if (size > 0) {
      bytes.resize(size);
      pg.broadcast(bytes.data(), size, 0);
    }
  }
  if (size == 0) return pg.rank() == 0 ? ds : open_split(c, split);
  char line[160];
  std::snprintf(line, sizeof line, "%s index: read by rank 0, sent to %d other rank%s (%.1f MB)",
                split.c_str(), pg.world_size() - 1, pg.world_size() > 2 ? "s" : "",
                static_cast<double>(size) / 1e6);
  notes.push_back(line);
  return pg.rank() == 0 ? ds : data::dataset_from_index_bytes(bytes);
}

// JPEGs are decoded at the task's decode_min_side (a reduced DCT scale where that changes nothing
// it needs); --cache ram and disk keep images at the size the task's pipelines first resize to.
Data load_data(const TrainConfig& c, dist::ProcessGroup& pg, const task::Task& task) {
  const int64_t decode_min_side = task.decode_min_side();
  Data d;
  std::shared_ptr<data::Dataset> full;
  // With several ranks, rank 0 alone downloads (into a folder the ranks share); the rest wait.
  const bool shared_download = c.download && c.dataset == "cifar10" && pg.world_size() > 1;
  if (!shared_download || pg.rank() == 0) {
    try {
      full = shared_download ? open_split(c, "train") : open_split_once(c, "train", pg, d.notes);
    } catch (const InputError& e) {
      if (!c.download || c.dataset != "cifar10") throw;
      std::fprintf(stderr, "dataset not found (%s); downloading CIFAR-10 into %s\n", e.what(),
                   c.data.c_str());
      fs::create_directories(c.data);
      data::download_cifar10(c.data, c.download_url.empty() ? data::kCifar10Url : c.download_url);
      full = data::open_dataset(c.dataset, c.data, "train");
    }
  }
  if (shared_download) {
    {
      // A download takes as long as it takes; a dead rank 0 ends the job anyway.
      const UntimedCollectives untimed(pg);
      pg.barrier();
    }
    if (!full) full = data::open_dataset(c.dataset, c.data, "train");
  }
  // --cache: decoded images kept in ram, on disk, or decoded as read (the choice and why printed).
  data::CacheOptions co{c.cache, c.cache_dir, c.threads};
  // Images kept at the size both pipelines first resize them to (classify: imgsz x imgsz).
  const std::array<int64_t, 2> keep = task.train_transform().leading_resize();
  if (keep == task.eval_transform().leading_resize()) co.resize = keep;
  auto cached = [&](std::shared_ptr<data::Dataset> ds, const char* split) {
    data::set_decode_min_side(*ds, decode_min_side);
    data::CachedDataset r = data::cache_dataset(std::move(ds), co);
    if (!r.line.empty()) d.notes.push_back(std::string(split) + " " + r.line);
    return r.dataset;
  };
  std::string index = data::index_fingerprint(*full);
  std::shared_ptr<const data::Dataset> all = cached(full, "train");
  d.classes = full->classes();
  if (c.val_split > 0) {
    HPCNET_REQUIRE(c.val_split < full->size(),
                   "--val-split " + std::to_string(c.val_split) + " leaves no training images (" +
                       std::to_string(full->size()) + " in the training split)");
    auto split = data::split_train_val(full->size(), c.val_split);
    d.train = std::make_shared<data::Subset>(all, split.train);
    d.val = std::make_shared<data::Subset>(all, split.val);
  } else {
    d.train = all;
    // A dataset with a validation split of its own (segmentation: images/val/) uses it.
    if (data::has_split(c.dataset, c.data, "val")) {
      std::shared_ptr<data::Dataset> val = open_split_once(c, "val", pg, d.notes);
      index += "+" + data::index_fingerprint(*val);
      d.val = cached(std::move(val), "val");
      HPCNET_REQUIRE(d.val->classes() == d.classes,
                     "--data " + c.data + ": the val split's classes differ from train's");
    } else if ((c.dataset == "segmentation" || c.dataset == "voc") && pg.rank() == 0) {
      std::fprintf(stderr,
                   "hpcnet: --data %s has no val split (images/val/, or a VOC "
                   "ImageSets/Segmentation/val.txt): training without validation (no val_miou, "
                   "no best.safetensors); --val-split N holds out N training images\n",
                   c.data.c_str());
    }
  }
  d.record = {{"path", c.data},
              {"dataset", c.dataset},
              {"train_images", d.train->size()},
              {"val_images", d.val ? d.val->size() : 0},
              {"index", index}};
  return d;
}

// "--data PATH (dataset, N train + M val images, index FINGERPRINT)" of a data record.
std::string describe_data(const nlohmann::json& r) {
  return "--data " + r.value("path", std::string("?")) + " (" +
         r.value("dataset", std::string("?")) + ", " +
         std::to_string(r.value("train_images", int64_t{0})) + " train + " +
         std::to_string(r.value("val_images", int64_t{0})) + " val images, index " +
         r.value("index", std::string("?")) + ")";
}

// --resume with --data: the data must be the run's (its index fingerprint the same); only the
// path may differ (the folder moved, or given as a .tar of the same layout), which is said on
// stderr. A checkpoint from before the record is taken as it is.
void check_resume_data(const RunFile& ckpt, const nlohmann::json& now, bool lead) {
  const nlohmann::json& was = ckpt.train->data;
  if (was.is_null()) return;
  const std::string path_was = was.value("path", std::string()), path_now = now.at("path");
  if (was.value("index", std::string()) != now.at("index").get<std::string>()) {
    throw InputError(
        ckpt.path + ": the run trained on " + describe_data(was) +
        (path_was == path_now ? "; that data has changed since: it now holds "
                              : "; the data given is another: ") +
        describe_data(now) +
        ". Resume with the run's own data, or start a new run from its weights (--weights " +
        ckpt.path + " --out NEW)");
  }
  if (lead && path_was != path_now)
    std::fprintf(stderr,
                 "hpcnet: resuming with --data %s: the run trained on %s, which held the same "
                 "data (index %s); the run now reads it from the new path\n",
                 path_now.c_str(), path_was.c_str(), now.at("index").get<std::string>().c_str());
}

// --fail-at-step RANK:STEP[:MODE] (testing): rank RANK fails just before its step STEP (counted
// from 1 in this invocation) by SIGKILL to itself ("kill", as kill -9), exit(1) without leaving
// MPI ("exit"), sleeping forever ("hang"), a SIGTERM or SIGINT to itself ("term", "int"), or a
// non-finite loss on that rank alone from that step on ("nan").
struct FailPoint {
  int rank = -1;
  int64_t step = 0;
  std::string mode = "kill";
};

FailPoint parse_fail_at(const std::string& text) {
  FailPoint f;
  if (text.empty()) return f;
  const std::string usage =
      "--fail-at-step " + text + ": expected RANK:STEP[:kill|exit|hang|term|int|nan]";
  size_t a = text.find(':');
  HPCNET_REQUIRE(a != std::string::npos, usage);
  size_t b = text.find(':', a + 1);
  try {
    f.rank = std::stoi(text.substr(0, a));
    f.step = std::stoll(text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
  } catch (const std::exception&) {
    throw InputError(usage);
  }
  if (b != std::string::npos) f.mode = text.substr(b + 1);
  HPCNET_REQUIRE(f.rank >= 0 && f.step >= 1 &&
                     (f.mode == "kill" || f.mode == "exit" || f.mode == "hang" ||
                      f.mode == "term" || f.mode == "int" || f.mode == "nan"),
                 usage);
  return f;
}

void fail_now(const FailPoint& f) {
  std::fprintf(stderr, "hpcnet: rank %d: --fail-at-step: %s before step %lld (testing)\n", f.rank,
               f.mode.c_str(), static_cast<long long>(f.step));
  std::fflush(stderr);
  if (f.mode == "term" || f.mode == "int") {  // delivered like kill -TERM / Ctrl-C; the run goes on
    ::raise(f.mode == "term" ? SIGTERM : SIGINT);
    return;
  }
  if (f.mode == "kill") ::kill(::getpid(), SIGKILL);
  if (f.mode == "exit") std::_Exit(1);
  for (;;) ::pause();  // hang
}

// SIGINT and SIGTERM during training: the first one is noted and the loop stops after the step it
// is in, writing the checkpoint (Slurm's --signal, a requeue, Ctrl-C lose nothing); a second one
// ends the process at once, as without the handler.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

// The handlers for one run_training call; the previous ones come back after it.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// The signal that stops the run after this step, agreed by every rank (SIGTERM over SIGINT): one
// signalled rank stops them all at the same step.
int agreed_stop_signal(dist::ProcessGroup& pg) {
  const int mine = g_stop_signal;
  if (pg.world_size() == 1) return mine;
  double v[2] = {mine == SIGINT ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0};
  pg.allreduce_sum(v, 2);
  return v[1] > 0 ? SIGTERM : (v[0] > 0 ? SIGINT : 0);
}

// "" when the loss is finite on every rank; otherwise what it became and where: "nan", or with
// several ranks "nan on rank 1" / "nan on rank 0, inf on rank 3" (the same text on every rank).
// One all-reduce of one number per step; a second, of one number per rank, only on a failure.
std::string nonfinite_ranks(dist::ProcessGroup& pg, double loss) {
  const bool finite = std::isfinite(loss);
  auto text = [](double v) { return std::isnan(v) ? std::string("nan") : v > 0 ? "inf" : "-inf"; };
  if (pg.world_size() == 1) return finite ? "" : text(loss);
  double count = finite ? 0 : 1;
  pg.allreduce_sum(&count, 1);
  if (count == 0) return "";
  // Each rank's slot holds its loss if that is not finite, else 0: the sums are the values.
  std::vector<double> value(static_cast<size_t>(pg.world_size()), 0.0);
  value[static_cast<size_t>(pg.rank())] = finite ? 0.0 : loss;
  pg.allreduce_sum(value.data(), value.size());
  std::string out;
  for (size_t r = 0; r < value.size(); ++r)
    if (!std::isfinite(value[r]))
      out += (out.empty() ? "" : ", ") + text(value[r]) + " on rank " + std::to_string(r);
  return out;
}

std::string fmt_lr(const char* f, double lr) {
  char b[32];
  std::snprintf(b, sizeof b, f, lr);
  return b;
}

// --weights: the model's every tensor from the file, which must hold exactly the model's names
// and shapes (load_state_dict lists the mismatches).
void load_initial_weights(const TrainConfig& c, nn::Module& model) {
  RunFile w = read_run_file(c.weights);
  HPCNET_REQUIRE(w.meta.model.empty() || w.meta.model == c.model,
                 "--weights " + c.weights + ": holds weights of model '" + w.meta.model +
                     "', not '" + c.model + "'");
  try {
    model.load_state_dict(w.model);
  } catch (const InputError& e) {
    throw InputError("--weights " + c.weights + ": does not fit " + c.model +
                     " for this dataset: " + e.what());
  }
}

// A checkpoint written between two optimizer steps of an accumulation: the gradients summed so
// far become the parameters' gradients again, so the next step sums exactly what it would have.
void restore_accumulated_grads(const RunFile& ckpt, const nn::NamedTensors& trainable,
                               const Device& device, const TrainState& st) {
  const bool pending = st.last_opt_step < st.steps - 1;
  if (!pending) return;
  size_t found = 0;
  for (const auto& [n, t] : trainable) {
    auto it = ckpt.grad.find(n);
    if (it == ckpt.grad.end()) continue;
    HPCNET_REQUIRE(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(),
                   "corrupt checkpoint: gradient grad." + n + " does not fit its parameter");
    Tensor param = t;  // a handle on the same parameter
    param.set_grad(it->second.to(device).clone());
    ++found;
  }
  // A parameter no batch has reached yet has no gradient; one that every batch reaches must be
  // there (an accumulation with no gradient at all is a checkpoint that lost them).
  HPCNET_REQUIRE(found > 0 && found == ckpt.grad.size(),
                 "corrupt checkpoint: it was written after batch " + std::to_string(st.steps) +
                     " between optimizer steps (last at " + std::to_string(st.last_opt_step + 1) +
                     ") and holds " + std::to_string(ckpt.grad.size()) +
                     " accumulated gradients, " + std::to_string(found) +
                     " of them for this model's trainable parameters");
}

// --freeze: the parameters under the given name prefixes (a prefix is a whole dotted component:
// "layer1" freezes layer1.0.conv1.weight, not layer10.*) stop requiring grad. Returns the others:
// what the optimizer and the gradient all-reduce see. InputError for a prefix that names no
// parameter (listing the model's top-level names) and for one that leaves nothing to train.
nn::NamedTensors apply_freeze(const TrainConfig& c, nn::Module& model) {
  nn::NamedTensors all = model.named_parameters();
  if (c.freeze.empty()) return all;
  std::vector<std::string> prefixes;
  for (size_t a = 0; a <= c.freeze.size();) {
    size_t b = c.freeze.find(',', a);
    if (b == std::string::npos) b = c.freeze.size();
    std::string p = c.freeze.substr(a, b - a);
    while (!p.empty() && p.front() == ' ') p.erase(p.begin());
    while (!p.empty() && (p.back() == ' ' || p.back() == '.')) p.pop_back();
    if (!p.empty()) prefixes.push_back(p);
    a = b + 1;
  }
  HPCNET_REQUIRE(!prefixes.empty(), "--freeze '" + c.freeze + "': names no prefix");
  std::vector<bool> used(prefixes.size(), false);
  nn::NamedTensors trainable;
  for (auto& [name, t] : all) {
    bool frozen = false;
    for (size_t i = 0; i < prefixes.size(); ++i)
      if (name == prefixes[i] || name.rfind(prefixes[i] + ".", 0) == 0) frozen = used[i] = true;
    if (frozen)
      t.set_requires_grad(false);
    else
      trainable.emplace_back(name, t);
  }
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (used[i]) continue;
    std::vector<std::string> tops;
    for (const auto& [name, t] : all) {
      std::string top = name.substr(0, name.find('.'));
      if (tops.empty() || tops.back() != top) tops.push_back(top);
    }
    std::string list;
    for (size_t k = 0; k < tops.size() && k < 12; ++k) list += (k ? ", " : "") + tops[k];
    if (tops.size() > 12) list += ", ...";
    throw InputError("--freeze " + prefixes[i] + ": names no parameter of " + c.model +
                     " (its parameters start with " + list + ")");
  }
  HPCNET_REQUIRE(!trainable.empty(),
                 "--freeze " + c.freeze + ": leaves no parameter of " + c.model + " to train");
  return trainable;
}

// A --out that holds files is another run's unless --resume or --exist-ok say otherwise (a
// folder holding only the lock file of an ended run counts as empty).
void check_run_directory(const TrainConfig& c) {
  std::error_code ec;
  if (!c.resume.empty() || !fs::is_directory(c.out, ec)) return;
  bool empty = true;
  for (const auto& e : fs::directory_iterator(c.out, ec))
    if (e.path().filename() != kRunLockFile) empty = false;
  if (empty) return;
  if (!c.exist_ok)
    throw InputError("--out " + c.out + " is not empty (another run?): continue it with --resume " +
                     c.out + ", replace it with --exist-ok, or choose another --out");
}

// Reads the checkpoint of --resume (the one reader of the format) and merges its recipe into c,
// before anything is written.
RunFile read_resume(TrainConfig& c) {
  const std::string path = (fs::path(c.resume) / "checkpoint.safetensors").string();
  HPCNET_REQUIRE(fs::exists(path), "--resume " + c.resume + ": no checkpoint.safetensors there");
  RunFile f = read_run_file(path);
  HPCNET_REQUIRE(f.train.has_value(), path + ": not an hpcnet checkpoint");
  merge_resumed_recipe(c, f.train->recipe, path);
  auto names = nn::model_names();
  if (std::find(names.begin(), names.end(), c.model) == names.end())
    throw InputError(path + ": checkpoint of model '" + c.model +
                     "', which this build does not have; resume it with a build that does");
  HPCNET_REQUIRE(f.meta.model == c.model,
                 path + ": checkpoint is for model '" + f.meta.model + "', not '" + c.model + "'");
  return f;
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg_in, std::ostream& out_all) {
  TrainConfig cfg = cfg_in;
  // Resume state is read (once) and checked, and the run's recipe merged in, before anything is
  // written.
  std::optional<RunFile> ckpt;
  if (!cfg.resume.empty())
    ckpt = read_resume(cfg);
  else
    apply_task_defaults(cfg);  // a detect model's unset fields: Ultralytics' defaults
  validate(cfg);
  data::set_max_image_pixels(cfg.max_image_pixels);  // before any dataset is read
  check_run_directory(cfg);
  const FailPoint fail_at = parse_fail_at(cfg.fail_at);
  const Device device = resolve_device(cfg.device);
  // Data parallelism: this process's place in the group (rank 0 of 1 without a launcher).
  dist::ProcessGroup& pg = dist::world();
  const int rank = pg.rank(), world = pg.world_size();
  const bool lead = rank == 0;
  std::ostream null_out(nullptr);  // other ranks print nothing
  std::ostream& out = lead ? out_all : null_out;
  // One writer per run folder (rank 0's): an existing folder is locked at once, before the data
  // is read, so a second `--exist-ok` or `--resume` of a run still training is refused before
  // it touches anything; a new folder is locked when it is created, below.
  RunLock run_lock;
  const std::string out_flag = (cfg.resume.empty() ? "--out " : "--resume ") + cfg.out;
  if (std::error_code ec; lead && fs::is_directory(cfg.out, ec))
    run_lock.acquire(cfg.out, out_flag);
  HPCNET_REQUIRE(world == 1 || device.is_cpu(),
                 "--device " + cfg.device + " with " + std::to_string(world) +
                     " ranks needs the NCCL process group, which is not implemented yet; use "
                     "--device cpu");
  if (cfg.threads == 0 && pg.local_size() > 1) {
    // Ranks sharing a node split its cores rather than each taking all of them.
    ops::set_num_threads(0);
    ops::set_num_threads(std::max(1, ops::get_num_threads() / pg.local_size()));
  } else {
    ops::set_num_threads(cfg.threads);
  }
  TrainState st;
  if (ckpt) {
    st.epochs_done = ckpt->train->epochs_done;
    st.steps = ckpt->train->steps;
    st.optimizer_steps = ckpt->train->optimizer_steps;
    st.last_opt_step = ckpt->train->last_opt_step;
    st.epoch_step = ckpt->train->epoch_step;
    st.best = ckpt->train->best;
    if (rank == 0) {  // the loss sums are all ranks' (see write_state): rank 0 carries them
      st.epoch_loss = ckpt->train->epoch_loss;
      st.running_loss = ckpt->train->running_loss;
    }
  }
  const std::unique_ptr<task::Task> task = task::make_task(resolved_task(cfg), task_options(cfg));

  Data d = load_data(cfg, pg, *task);
  if (!cfg.quiet)
    for (const std::string& note : d.notes) out << note << std::endl;
  if (ckpt && !ckpt->meta.classes.empty() && ckpt->meta.classes != d.classes) {
    ModelMeta here = ckpt->meta;
    here.classes = d.classes;
    const bool names = here.classes.size() == ckpt->meta.classes.size();
    throw InputError(ckpt->path + " holds " + describe_run(ckpt->meta, names) + "; with --data " +
                     cfg.data + " it would be " + describe_run(here, names) +
                     ": resume it with the run's own data");
  }
  if (ckpt) check_resume_data(*ckpt, d.record, lead);
  manual_seed(cfg.seed);
  std::shared_ptr<nn::Module> model = nn::make_model(
      cfg.model, nn::ModelOptions{static_cast<int64_t>(d.classes.size()), cfg.aux_loss});
  HPCNET_REQUIRE(d.train->target_kind() == task->target_kind(),
                 "--task " + task->name() + " needs a dataset of " +
                     data::target_kind_name(task->target_kind()) + " targets; --dataset " +
                     cfg.dataset + " holds " + data::target_kind_name(d.train->target_kind()));
  if (!cfg.weights.empty() && !ckpt) load_initial_weights(cfg, *model);
  ModelMeta meta;
  meta.model = cfg.model;
  meta.task = task->name();
  meta.classes = d.classes;
  meta.imgsz = task->options().imgsz;
  if (task->options().augment == "imagenet") meta.eval_policy = "imagenet";
  meta.val_split = cfg.val_split;
  model->to_(device);
  const nn::NamedTensors trainable = apply_freeze(cfg, *model);
  HPCNET_REQUIRE(cfg.precision == "fp32" || device.is_cpu(),
                 "--precision bf16 is implemented for the CPU (oneDNN) only; use --precision fp32 "
                 "with --device " +
                     cfg.device);
  apply_precision(cfg.precision);
  apply_conv_algorithm(cfg.conv_algorithm);
  // --optimizer auto (Ultralytics): AdamW at a rate fitted to the class count for short runs.
  const ResolvedOptimizer ro = resolve_optimizer(cfg, d.train->size(), d.classes.size(), world);
  if (lead && cfg.optimizer == "auto" && !cfg.quiet)
    out << "optimizer: 'auto' chose " << ro.name << "(lr=" << ro.lr << ", momentum=" << ro.momentum
        << ")" << (ro.note.empty() ? "" : " " + ro.note) << std::endl;
  optim::LrSchedule schedule = make_schedule(cfg);
  schedule.lr = ro.lr;
  if (cfg.optimizer == "auto") schedule.warmup_bias_lr = 0.0;  // as Ultralytics' auto
  auto make_opt = [&](const nn::NamedTensors& params, double wd) -> std::unique_ptr<optim::Optimizer> {
    if (ro.name == "AdamW")
      return std::make_unique<optim::AdamW>(
          params, optim::AdamWOptions{ro.lr, ro.momentum, cfg.beta2, cfg.adam_eps, wd});
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{ro.lr, ro.momentum, cfg.dampening, wd, ro.nesterov});
  };
  std::unique_ptr<optim::Optimizer> opt_ptr;
  optim::GroupedOptimizer* groups = nullptr;
  if (cfg.param_groups) {
    // Ultralytics' three groups: decayed weights, norm weights and biases (the last two without
    // weight decay), the decay scaled by the nominal batch.
    const auto g = optim::ultralytics_param_groups(*model, trainable);
    const double wd = ro.weight_decay;
    auto grouped = std::make_unique<optim::GroupedOptimizer>(
        std::vector<nn::NamedTensors>{g[0], g[1], g[2]},
        [&](const nn::NamedTensors& p, size_t k) { return make_opt(p, k == 0 ? wd : 0.0); });
    groups = grouped.get();
    opt_ptr = std::move(grouped);
  } else {
    opt_ptr = make_opt(trainable, ro.weight_decay);
  }
  optim::Optimizer& opt = *opt_ptr;
  // The per-step rates (and SGD momentum during Ultralytics' warm-up) of every group.
  auto set_rates = [&](int64_t step, int64_t steps_per_epoch) {
    if (!groups) {
      opt.set_lr(schedule.lr_at(step, steps_per_epoch, cfg.epochs));
      if (auto* sgd = dynamic_cast<optim::SGD*>(&opt))
        sgd->set_momentum(schedule.momentum_at(step, steps_per_epoch, cfg.epochs, cfg.momentum));
      return;
    }
    for (size_t k = 0; k < groups->num_groups(); ++k) {
      optim::Optimizer& o = groups->group(k);
      o.set_lr(schedule.group_lr_at(step, steps_per_epoch, cfg.epochs, k == 2));
      if (auto* sgd = dynamic_cast<optim::SGD*>(&o))
        sgd->set_momentum(schedule.momentum_at(step, steps_per_epoch, cfg.epochs, cfg.momentum));
    }
  };
  std::unique_ptr<optim::EMA> ema;
  if (cfg.ema_decay > 0) ema = std::make_unique<optim::EMA>(*model, cfg.ema_decay, cfg.ema_tau);
  if (ckpt) {
    try {
      model->load_state_dict(ckpt->model);
      opt.load_state_dict(ckpt->optim, st.optimizer_steps);
      if (ema) {
        ema->load_state_dict(ckpt->ema);
        ema->set_updates(st.optimizer_steps);  // one EMA update per optimizer step
      }
      restore_accumulated_grads(*ckpt, trainable, device, st);
    } catch (const InputError& e) {
      throw InputError(ckpt->path + ": " + e.what());
    }
    check_resume_folder(*ckpt, cfg.out);  // not a checkpoint copied into another run's folder
    default_rng().set_state(ckpt->train->rng);
    if (lead && ckpt->train->world_size != world)
      std::fprintf(stderr,
                   "hpcnet: resuming a run of %d ranks on %d: the global batch is now %lld "
                   "(%d x %lld per rank)\n",
                   ckpt->train->world_size, world, static_cast<long long>(world * cfg.batch_size),
                   world, static_cast<long long>(cfg.batch_size));
    ckpt.reset();
    if (!cfg.quiet && st.epochs_done < cfg.epochs)
      out << "resuming " << cfg.out << " from epoch " << st.epochs_done + 1
          << (st.epoch_step > 0 ? " step " + std::to_string(st.epoch_step + 1) : std::string())
          << " (of " << cfg.epochs << ")" << std::endl;
  }
  // Every replica starts from rank 0's state (ranks wait here for the slowest data loading, hence
  // the longer timeout), and gradients are averaged over ranks in buckets during backward.
  std::unique_ptr<dist::GradReducer> reducer;
  // Sums doubles over the ranks (the loss normaliser of detect, SyncBatchNorm's statistics).
  const F::RankSum rank_sum = [&pg](double* d, size_t n) { pg.allreduce_sum(d, n); };
  const task::Task::StepRanks step_ranks{world, world > 1 ? rank_sum : F::RankSum{}};
  if (world > 1) {
    pg.set_timeout(cfg.dist_timeout > 0 ? std::max(cfg.dist_timeout, 600.0) : 0);
    for (auto& [n, t] : model->state_dict()) pg.broadcast(t, 0);
    for (auto& [n, t] : opt.state_dict()) pg.broadcast(t, 0);
    if (ema)
      for (auto& [n, t] : ema->state_dict()) pg.broadcast(t, 0);
    pg.set_timeout(cfg.dist_timeout);
    std::vector<Tensor> trained;
    // Parameters the model itself keeps fixed (yolov8's DFL projection) have no gradient.
    for (const auto& [n, t] : trainable)
      if (t.requires_grad()) trained.push_back(t);
    // --sync-bn: every BatchNorm normalises with the statistics of all ranks' batches.
    if (cfg.sync_bn)
      for (auto& [name, m] : model->named_modules())
        if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) bn->sync = rank_sum;
    reducer = std::make_unique<dist::GradReducer>(
        pg, trained, dist::ReducerOptions{static_cast<size_t>(cfg.bucket_kb) * 1024});
  }

  data::DataLoaderOptions lo;
  lo.batch_size = cfg.batch_size;
  lo.shuffle = true;
  lo.drop_last = false;
  lo.num_workers = cfg.workers;
  // Small batches are cheap to hold: a deeper ring lets workers run ahead in bursts.
  lo.prefetch_factor = cfg.workers > 0 ? std::max<int64_t>(2, 16 / cfg.workers) : 2;
  lo.seed = cfg.seed;
  lo.rank = rank;  // DistributedSampler: this rank's share of every epoch
  lo.world_size = world;
  lo.shuffle_buffer = cfg.shuffle_buffer;  // > 0: shards streamed in turn through a buffer
  data::Compose first_tf = task->train_transform(st.epochs_done, cfg.epochs);
  std::string loader_tf = first_tf.str();
  auto loader_ptr = std::make_unique<data::DataLoader>(d.train, std::move(first_tf), lo);
  std::unique_ptr<data::DataLoader> val_loader;
  if (d.val) {
    data::DataLoaderOptions vo;
    vo.batch_size = task->val_batch_size(cfg.batch_size);
    vo.num_workers = std::min(cfg.workers, 1);
    std::shared_ptr<const data::Dataset> val = d.val;
    if (world > 1) {  // this rank's slice: positions rank, rank + W, ...
      std::vector<int64_t> mine;
      for (int64_t i = rank; i < val->size(); i += world) mine.push_back(i);
      val = std::make_shared<data::Subset>(val, std::move(mine));
    }
    val_loader = std::make_unique<data::DataLoader>(val, task->eval_transform(), vo);
  }

  if (lead) {
    // An unusable --out is the user's to fix (exit 2), like bad data.
    std::error_code ec;
    fs::create_directories(cfg.out, ec);
    if (ec || !fs::is_directory(cfg.out))
      throw InputError("--out " + cfg.out + ": cannot create the run directory (" +
                       (ec ? ec.message() : std::string("not a directory")) + ")");
    run_lock.acquire(cfg.out, out_flag);
    // Temporary files of writers that died mid-write (NAME.tmp.PID of a process that is gone).
    for (const auto& e : fs::directory_iterator(cfg.out, ec)) {
      const std::string name = e.path().filename().string();
      const size_t at = name.rfind(".tmp.");
      if (at == std::string::npos || !e.is_regular_file(ec)) continue;
      const std::string pid = name.substr(at + 5);
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      const long p = std::strtol(pid.c_str(), nullptr, 10);
      if (p > 0 && ::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH)
        fs::remove(e.path(), ec);
    }
    // --exist-ok replaces the run there: its checkpoint must not be resumed by mistake later.
    if (cfg.resume.empty())
      for (const char* f : {"checkpoint.safetensors", "model.safetensors", "best.safetensors"})
        fs::remove(fs::path(cfg.out) / f, ec);
  }
  const std::string ckpt_path = (fs::path(cfg.out) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(cfg.out) / "model.safetensors").string();
  const std::string best_path = (fs::path(cfg.out) / "best.safetensors").string();
  // The checkpoint of the run as it stands (every rank calls this: the loss sums are reduced).
  auto write_state = [&](int64_t epoch_step, double epoch_loss, double running_loss) {
    double sums[2] = {epoch_loss, running_loss};
    if (world > 1) pg.allreduce_sum(sums, 2);
    if (!lead) return;
    st.rng = default_rng().state();
    st.recipe = recipe_json(cfg);
    st.data = d.record;
    st.world_size = world;
    st.epoch_step = epoch_step;
    st.epoch_loss = sums[0];
    st.running_loss = sums[1];
    // Between two optimizer steps of an accumulation the gradients summed so far go along.
    nn::NamedTensors grads;
    if (st.last_opt_step < st.steps - 1)
      for (const auto& [n, t] : trainable)
        if (t.grad().defined()) grads.emplace_back(n, t.grad());
    write_checkpoint(ckpt_path, meta, model->state_dict(), opt.state_dict(),
                     ema ? ema->state_dict() : nn::NamedTensors{}, st, grads);
  };
  StopSignals signals;
  int stopped_by = 0;  // SIGINT or SIGTERM, once one has stopped the run
  const int64_t resume_epoch = st.epochs_done, resume_step = st.epoch_step;
  // metrics.jsonl, metrics.csv and the TensorBoard events, kept by rank 0 alone.
  RunMetrics metrics(lead, cfg.out, st.epochs_done > 0 || st.epoch_step > 0,
                     {task->make_metric(d.classes)->value_keys(), task->loss_part_names()});
  {
    nlohmann::json rec = {{"event", "start"},
                          {"config", recipe_json(cfg)},
                          {"train_images", d.train->size()},
                          {"val_images", d.val ? d.val->size() : 0},
                          {"start_epoch", st.epochs_done + 1},
                          {"threads", ops::get_num_threads()}};
    if (!cfg.freeze.empty()) {
      int64_t n = 0;
      for (const auto& [name, t] : trainable) n += t.numel();
      rec["trainable_parameters"] = n;
      rec["frozen_parameters"] = model->num_parameters() - n;
    }
    if (world > 1) {
      rec["world_size"] = world;
      rec["global_batch_size"] = world * cfg.batch_size;
      rec["allreduce_floats_per_step"] = reducer->num_floats();
      rec["allreduce_buckets"] = reducer->num_buckets();
    }
    metrics.write(rec, st.steps);
  }

  const bool show_bar = lead && show_progress_bar(cfg.progress, stdout_is_tty(), under_launcher());
  TrainResult res;
  res.world_size = world;
  model->train();
  using clock = std::chrono::steady_clock;
  auto t_start = clock::now();
  bool stop = false, partial = false;
  int64_t skipped_in_a_row = 0;  // --nan-policy skip
  for (int64_t epoch = st.epochs_done; epoch < cfg.epochs && !stop; ++epoch) {
    auto t_epoch = clock::now();
    // A run resumed inside an epoch starts at the batch after its checkpoint's.
    const int64_t first = epoch == resume_epoch ? resume_step : 0;
    {  // detect's close_mosaic: the epoch's transforms, when they changed
      data::Compose tf = task->train_transform(epoch, cfg.epochs);
      std::string text = tf.str();
      if (text != loader_tf) {
        loader_tf = std::move(text);
        loader_ptr = std::make_unique<data::DataLoader>(d.train, std::move(tf), lo);
        if (!cfg.quiet) out << "epoch " << epoch + 1 << ": " << loader_tf << std::endl;
      }
    }
    data::DataLoader& loader = *loader_ptr;
    loader.begin_epoch(epoch, first);
    ProgressBar bar(show_bar,
                    "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                    loader.num_batches(), world * cfg.batch_size);
    double running_loss = first ? st.running_loss : 0, epoch_loss = first ? st.epoch_loss : 0;
    LossPartSums epoch_parts(task->loss_part_names());  // detect's box, cls, dfl
    int64_t epoch_steps = first;
    data::Batch batch;
    double epoch_wait = 0;  // seconds the training thread waited for batches this epoch
    int64_t epoch_images = 0;  // images this rank read this epoch
    auto next_batch = [&] {  // times how long the step waits for data
      auto t0 = clock::now();
      bool more = loader.next(batch);
      const double w = std::chrono::duration<double>(clock::now() - t0).count();
      res.data_wait_seconds += w;
      epoch_wait += w;
      epoch_images += more ? batch.size : 0;
      // The bar says so when the loader, not the model, sets the pace.
      const double so_far = std::chrono::duration<double>(clock::now() - t_epoch).count();
      bar.set_note(so_far > 2 && epoch_wait > 0.2 * so_far
                       ? "data-bound: waiting " + std::to_string(static_cast<int>(
                                                      100 * epoch_wait / so_far)) +
                             "%, add --workers or --cache"
                       : "");
      return more;
    };
    for (int64_t i = first; next_batch(); ++i) {
      const bool nan_now = fail_at.rank == rank && res.steps + 1 >= fail_at.step &&
                           fail_at.mode == "nan";  // this rank's loss, from that step on
      if (fail_at.rank == rank && res.steps + 1 == fail_at.step && fail_at.mode != "nan")
        fail_now(fail_at);
      set_rates(st.steps, loader.num_batches());
      if (!device.is_cpu()) {
        batch.images = batch.images.to(device);
        batch.labels = batch.labels.to(device);
        if (batch.masks.defined()) batch.masks = batch.masks.to(device);
      }
      Tensor loss = task->train_loss(model->forward_all(batch.images), batch, step_ranks);
      // Checked before the step, so the weights are still the last finite ones.
      double l = task->train_loss_for_log(loss.item(), batch, step_ranks);
      if (nan_now) l = std::numeric_limits<double>::quiet_NaN();
      // Every rank stops at the same step, naming the ranks whose loss was not finite (one rank
      // alone stopping would leave the others waiting in the gradient all-reduce).
      const std::string bad = nonfinite_ranks(pg, l);
      const std::string where = "at epoch " + std::to_string(epoch + 1) + " step " +
                                std::to_string(i + 1);
      if (!bad.empty() && cfg.nan_policy == "skip" && skipped_in_a_row < 10) {
        // Dropped on every rank alike (they all saw the same verdict): no gradient, no step.
        ++skipped_in_a_row;
        ++res.skipped_steps;
        if (lead) {
          bar.clear();
          std::fprintf(stderr, "hpcnet: loss became %s %s: batch skipped (--nan-policy skip; %lld "
                       "so far)\n", bad.c_str(), where.c_str(),
                       static_cast<long long>(res.skipped_steps));
        }
        metrics.write({{"event", "skipped"}, {"epoch", epoch + 1}, {"step", i + 1},
                       {"loss", bad}, {"skipped_steps", res.skipped_steps}},
                      st.steps);
      } else if (!bad.empty()) {  // a failure of the run (exit 1), not of hpcnet
        throw Error("loss became " + bad + " " + where +
                    (skipped_in_a_row ? " (and in the " + std::to_string(skipped_in_a_row) +
                                            " batches before it, skipped)"
                                      : std::string()) +
                    "; nothing after the last checkpoint is saved (" +
                    (fs::exists(ckpt_path) ? ckpt_path + " holds it" : std::string("none yet")) +
                    "); lower --lr or use --clip-grad-norm");
      } else {
        skipped_in_a_row = 0;
      }
      const bool skipped = !bad.empty();  // --nan-policy skip dropped this batch
      if (skipped)
        ;
      else if (reducer)
        reducer->backward(loss);  // gradients averaged over ranks
      else
        loss.backward();
      // Ultralytics' accumulation (--nbs): gradients are summed over batches until those since
      // the last optimizer step reach `accumulate`; then clip, step, zero and update the EMA.
      if (!skipped && st.steps - st.last_opt_step >=
                          schedule.accumulate_at(st.steps, loader.num_batches(), cfg.epochs,
                                                 cfg.nbs, world * cfg.batch_size)) {
        if (cfg.clip_grad_norm > 0)
          optim::clip_grad_norm(model->parameters(), cfg.clip_grad_norm);
        opt.step();
        opt.zero_grad();
        if (ema) ema->update(*model);
        st.last_opt_step = st.steps;
        ++st.optimizer_steps;
      }
      if (!skipped) {  // a skipped batch adds nothing to the loss sums
        running_loss += l;
        epoch_loss += l;
        epoch_parts.add(task->last_loss_parts());
      }
      ++epoch_steps;
      ++st.steps;
      ++res.steps;
      res.images += batch.size * world;  // batch b has the same size on every rank
      if ((i + 1) % cfg.log_every == 0) {
        bar.clear();
        if (world > 1) pg.allreduce_sum(&running_loss, 1);  // the mean over every rank's batches
        double avg = running_loss / (cfg.log_every * world);
        char line[64];
        std::snprintf(line, sizeof line, "[%lld, %5lld] loss: %.3f",
                      static_cast<long long>(epoch + 1), static_cast<long long>(i + 1), avg);
        if (!cfg.quiet) out << line << std::endl;
        res.last_report_loss = avg;
        double el = std::chrono::duration<double>(clock::now() - t_start).count();
        metrics.write({{"event", "log"},
                       {"epoch", epoch + 1},
                       {"step", i + 1},
                       {"loss", avg},
                       {"lr", opt.lr()},
                       {"elapsed_s", el}},
                      st.steps);
        running_loss = 0;
      }
      bar.update(i + 1);
      // A signal, or --save-every: the checkpoint of this step (at the epoch's last batch the
      // epoch's own checkpoint follows; a signal then stops the run after it).
      const int sig = agreed_stop_signal(pg);
      const bool last_batch = i + 1 == loader.num_batches();
      if (!last_batch && (sig || (cfg.save_every > 0 && st.steps % cfg.save_every == 0)))
        write_state(i + 1, epoch_loss, running_loss);
      if (sig) {
        stopped_by = sig;
        stop = true;
        break;
      }
      if (cfg.max_steps > 0 && res.steps >= cfg.max_steps) {
        stop = true;
        break;
      }
    }
    // The step limit may fall on the epoch's last batch: that epoch is complete.
    partial = stop && epoch_steps < loader.num_batches();
    bar.clear();
    double epoch_s = std::chrono::duration<double>(clock::now() - t_epoch).count();
    res.train_seconds += epoch_s;
    if (world > 1) pg.allreduce_sum(&epoch_loss, 1);
    nlohmann::json rec = {
        {"event", "epoch"},
        {"epoch", epoch + 1},
        {"steps", epoch_steps},
        {"train_loss", epoch_steps ? epoch_loss / (epoch_steps * world) : 0.0},
        {"seconds", epoch_s},
        {"images_per_sec", epoch_s > 0 ? epoch_steps * cfg.batch_size * world / epoch_s : 0},
        {"data_wait_seconds", epoch_wait},
        {"data_wait_share", epoch_s > 0 ? epoch_wait / epoch_s : 0.0}};
    {  // each rank's share of the images read (DistributedSampler): one number per rank
      std::vector<double> per_rank(static_cast<size_t>(world), 0.0);
      per_rank[static_cast<size_t>(rank)] = static_cast<double>(epoch_images);
      if (world > 1) pg.allreduce_sum(per_rank.data(), per_rank.size());
      rec["images_read_per_rank"] = per_rank;
    }
    epoch_parts.put_means(rec, "train_", pg);
    if (partial) break;  // a partial epoch is not checkpointed (a signal's was, above)
    st.epochs_done = epoch + 1;
    // Replicas must be identical; a cheap fingerprint check catches a transport or ordering bug.
    dist::check_same_on_all_ranks(pg, model->parameters(),
                                  "model parameters after epoch " + std::to_string(epoch + 1));
    // With an EMA, evaluation and the model files use the averaged weights.
    if (ema) ema->swap(*model);
    // Without --sync-bn each rank's BatchNorm statistics follow its own batches: every rank
    // evaluates with rank 0's, the ones saved (DDP broadcasts them at every forward).
    if (world > 1)
      for (auto& [n, t] : model->named_buffers()) pg.broadcast(t, 0);
    bool improved = false;
    std::string val_text;
    if (val_loader) {
      task::LossSum val_loss;
      // The screen is not blank while validation runs: a bar of its own, erased at the end.
      ProgressBar val_bar(show_bar,
                          "val " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                          val_loader->num_batches(), world * val_loader->options().batch_size);
      // Validation's tensors have other shapes than training's (no graph, often another batch
      // size), so the CPU allocator's cached blocks of one fit the other badly: held across,
      // they add up (a U-Net epoch side by side with smp, validating at batch 64, peaked at
      // 2,789 MB against 2,518). Handing them back on both sides makes the peak the larger of
      // the two, for one step of fresh allocations after each validation.
      cpu_allocator_release_cached();
      std::unique_ptr<task::Metric> ev =
          evaluate_sharded(pg, *task, *model, *val_loader, &val_loss,
                           [&](int64_t done) { val_bar.update(done); });
      cpu_allocator_release_cached();
      val_bar.clear();
      rec["val_loss"] = val_loss.mean();
      put_named(rec, "val_", task->loss_part_names(), val_loss.part_means());
      res.val_accuracy = ev->value();
      put_named(rec, "", ev->value_keys(), ev->values());
      improved = std::isfinite(ev->value()) && (!st.best || ev->value() > *st.best);
      if (improved) st.best = ev->value();
      val_text = "  " + ev->value_text();
    }
    rec["lr"] = opt.lr();
    metrics.write(rec, st.steps);
    // The model files first, the checkpoint last: killed in between, a resume redoes the epoch.
    if (lead) save_model(model_path, *model, meta);
    if (lead && improved) save_model(best_path, *model, meta);  // by the validation metric
    if (ema) ema->swap(*model);
    write_state(0, 0, 0);
    if (!cfg.quiet) {
      char line[200];
      const double lr = opt.lr();
      std::snprintf(line, sizeof line, "epoch %lld/%lld  train_loss %.3f%s  lr %s  %.1f s",
                    static_cast<long long>(epoch + 1), static_cast<long long>(cfg.epochs),
                    rec["train_loss"].get<double>(), val_text.c_str(),
                    (lr != 0 && lr < 1e-3 ? fmt_lr("%.2e", lr) : fmt_lr("%.4f", lr)).c_str(),
                    epoch_s);
      out << line;
      // Waiting for data is worth a word only when it is a real part of the epoch.
      if (epoch_s > 0 && epoch_wait >= 0.1 * epoch_s)
        out << "  data wait " << static_cast<int>(100 * epoch_wait / epoch_s) << "%";
      out << std::endl;
    }
  }
  if (partial && !stopped_by && lead) {
    if (ema) ema->swap(*model);
    save_model(model_path, *model, meta);
    if (ema) ema->swap(*model);
  }
  metrics.write({{"event", "end"},
                 {"steps", res.steps},
                 {"images", res.images},
                 {"train_seconds", res.train_seconds},
                 {"images_per_sec", res.train_seconds > 0 ? res.images / res.train_seconds : 0.0},
                 {"last_report_loss", res.last_report_loss},
                 {"val_accuracy", res.val_accuracy},
                 {"data_wait_seconds", res.data_wait_seconds}},
                st.steps);
  if (stopped_by) {
    res.exit_code = 128 + stopped_by;
    const char* signame = stopped_by == SIGTERM ? "SIGTERM" : "SIGINT";
    const int64_t at_epoch = st.epochs_done + (st.epoch_step > 0 ? 1 : 0);
    metrics.write({{"event", "stopped"},
                   {"signal", signame},
                   {"epoch", at_epoch},
                   {"epoch_step", st.epoch_step},
                   {"steps", st.steps}},
                  st.steps);
    if (lead)
      std::fprintf(stderr,
                   "hpcnet: %s: stopped after step %lld (epoch %lld); %s holds it: continue with "
                   "hpcnet train --resume %s\n",
                   signame, static_cast<long long>(st.steps), static_cast<long long>(at_epoch),
                   ckpt_path.c_str(), cfg.out.c_str());
    return res;
  }
  if (!cfg.quiet) out << "Finished Training" << std::endl;
  return res;
}

}  // namespace hpcnet::train
