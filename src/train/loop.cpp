// The training loop behind `hpcnet train`: the tutorial's program (data -> model -> the task's
// loss -> backward -> SGD, loss lines every log_every mini-batches), plus checkpoints after every
// epoch, exact resume, metrics (run_metrics.cpp: jsonl, csv, TensorBoard) and a progress bar on
// terminals; data-parallel over the ranks of dist::world() (DistributedSampler shares, bucketed
// gradient all-reduce, rank 0 writes). The Trainer at the end of the file runs it in named steps
// (set-up, epoch, train_step, optimizer_step, validate, save_checkpoint), as Ultralytics'
// BaseTrainer. What a target is, the loop leaves to the task; the recipe is recipe.cpp's, the run
// files checkpoint.cpp's.
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
#include "src/core/cuda_device.h"
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
  data::DetectionData detection = data::load_detection_dataset(c.data, split);
  if (const std::string none = detection.report.no_objects(); !none.empty() && split == "train")
    throw InputError(none + "; there is nothing to train on");
  for (const std::string& line : detection.report.lines())
    std::fprintf(stderr, "%s\n", line.c_str());
  return detection.dataset;
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
  Data loaded;
  std::shared_ptr<data::Dataset> full;
  // With several ranks, rank 0 alone downloads (into a folder the ranks share); the rest wait.
  const bool shared_download = c.download && c.dataset == "cifar10" && pg.world_size() > 1;
  if (!shared_download || pg.rank() == 0) {
    try {
      full =
          shared_download ? open_split(c, "train") : open_split_once(c, "train", pg, loaded.notes);
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
  data::CacheOptions cache{c.cache, c.cache_dir, c.threads};
  // Images kept at the size both pipelines first resize them to (classify: imgsz x imgsz).
  const std::array<int64_t, 2> keep = task.train_transform().leading_resize();
  if (keep == task.eval_transform().leading_resize()) cache.resize = keep;
  auto cached = [&](std::shared_ptr<data::Dataset> ds, const char* split) {
    data::set_decode_min_side(*ds, decode_min_side);
    data::CachedDataset r = data::cache_dataset(std::move(ds), cache);
    if (!r.line.empty()) loaded.notes.push_back(std::string(split) + " " + r.line);
    return r.dataset;
  };
  std::string index = data::index_fingerprint(*full);
  std::shared_ptr<const data::Dataset> all = cached(full, "train");
  loaded.classes = full->classes();
  if (c.val_split > 0) {
    HPCNET_REQUIRE(c.val_split < full->size(),
                   "--val-split " + std::to_string(c.val_split) + " leaves no training images (" +
                       std::to_string(full->size()) + " in the training split)");
    auto split = data::split_train_val(full->size(), c.val_split);
    loaded.train = std::make_shared<data::Subset>(all, split.train);
    loaded.val = std::make_shared<data::Subset>(all, split.val);
  } else {
    loaded.train = all;
    // A dataset with a validation split of its own (segmentation: images/val/) uses it.
    if (data::has_split(c.dataset, c.data, "val")) {
      std::shared_ptr<data::Dataset> val = open_split_once(c, "val", pg, loaded.notes);
      index += "+" + data::index_fingerprint(*val);
      loaded.val = cached(std::move(val), "val");
      HPCNET_REQUIRE(loaded.val->classes() == loaded.classes,
                     "--data " + c.data + ": the val split's classes differ from train's");
    } else if ((c.dataset == "segmentation" || c.dataset == "voc") && pg.rank() == 0) {
      std::fprintf(stderr,
                   "hpcnet: --data %s has no val split (images/val/, or a VOC "
                   "ImageSets/Segmentation/val.txt): training without validation (no val_miou, "
                   "no best.safetensors); --val-split N holds out N training images\n",
                   c.data.c_str());
    }
  }
  loaded.record = {{"path", c.data},
                   {"dataset", c.dataset},
                   {"train_images", loaded.train->size()},
                   {"val_images", loaded.val ? loaded.val->size() : 0},
                   {"index", index}};
  return loaded;
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

// Trainer::defer_loss_: on CUDA (or as HPCNET_DEFER_LOSS says), --nan-policy stop (skip must
// know before the step) and no injected NaN. Detect's parts are deferred with its loss. With
// several ranks the deferred losses are compared across ranks when they are read, step by step
// in the same order on every rank, so all stop at the same step as they would have without
// deferring.
bool defers_losses(const TrainConfig& c, Device device, const task::Task& task,
                   const FailPoint& fail) {
  bool want = device.is_cuda();
  if (const char* v = std::getenv("HPCNET_DEFER_LOSS"); v && *v) want = std::string(v) != "0";
  return want && c.nan_policy != "skip" && fail.mode != "nan";
}

// Batches go to a GPU through PinnedUploader's pinned ring unless HPCNET_PINNED_UPLOAD=0 (plain
// copies from pageable memory, each waiting for the stream: for telling the two apart on a GPU).
bool pinned_uploads() {
  static const bool on = [] {
    const char* v = std::getenv("HPCNET_PINNED_UPLOAD");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

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
// and shapes (load_state_dict lists the mismatches). Fine-tuning to another class count: where
// the file's classifier (the registry's ModelInfo::classifier, e.g. torchvision's "fc") has
// another number of rows over the same features (its weight and bias alike), the classifier keeps the initialisation it was
// just given (said in one line on stderr, by the lead rank) and every other tensor loads strictly.
void load_initial_weights(const TrainConfig& c, nn::Module& model, bool say) {
  RunFile w = read_run_file(c.weights);
  HPCNET_REQUIRE(w.meta.model.empty() || w.meta.model == c.model,
                 "--weights " + c.weights + ": holds weights of model '" + w.meta.model +
                     "', not '" + c.model + "'");
  if (const std::string& head = nn::model_info(c.model).classifier; !head.empty()) {
    nn::NamedTensors mine = model.named_parameters();
    auto own = [&](const std::string& n) -> const Tensor* {
      for (const auto& [k, t] : mine)
        if (k == n) return &t;
      return nullptr;
    };
    const Tensor* weight = own(head + ".weight");
    auto file_weight = w.model.find(head + ".weight");
    if (weight && file_weight != w.model.end() && file_weight->second.dim() == weight->dim() &&
        file_weight->second.shape() != weight->shape() &&
        Shape(file_weight->second.shape().begin() + 1, file_weight->second.shape().end()) ==
            Shape(weight->shape().begin() + 1, weight->shape().end()) &&
        (!w.model.count(head + ".bias") ||
         w.model.at(head + ".bias").shape() == Shape{file_weight->second.size(0)})) {
      const int64_t theirs = file_weight->second.size(0), ours = weight->size(0);
      for (const std::string& n : {head + ".weight", head + ".bias"})
        if (const Tensor* t = own(n); t && w.model.count(n)) w.model[n] = t->clone();
      if (say)
        std::fprintf(stderr,
                     "--weights %s: its classifier %s has %lld classes, this run's data %lld: %s "
                     "is replaced and re-initialised, every other tensor loaded from the file\n",
                     c.weights.c_str(), head.c_str(), static_cast<long long>(theirs),
                     static_cast<long long>(ours), head.c_str());
    }
  }
  try {
    model.load_state_dict(w.model);
  } catch (const InputError& e) {
    throw InputError("--weights " + c.weights + ": does not fit " + c.model +
                     " for this dataset: " + e.what());
  }
}

// --encoder-weights: torchvision's ImageNet ResNet into the model's encoder (nn::load_encoder_weights),
// said in one line on stderr by the lead rank.
void load_encoder_weights(const TrainConfig& c, nn::Module& model, bool say) {
  RunFile w = read_run_file(c.encoder_weights);
  const std::string line = nn::load_encoder_weights(model, c.model, std::move(w.model),
                                                    "--encoder-weights " + c.encoder_weights);
  if (say) std::fprintf(stderr, "%s\n", line.c_str());
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

// One epoch's running numbers: where it starts, its loss sums, its time waiting for data and its
// progress bar.
struct EpochState {
  EpochState(int64_t epoch_in, int64_t first_in, std::chrono::steady_clock::time_point start_in,
             bool show_bar, int64_t epochs, int64_t num_batches, int64_t images_per_step,
             std::vector<std::string> part_names)
      : epoch(epoch_in),
        first(first_in),
        start(start_in),
        bar(show_bar, "epoch " + std::to_string(epoch_in + 1) + "/" + std::to_string(epochs),
            num_batches, images_per_step),
        parts(std::move(part_names)),
        steps(first_in) {}
  int64_t epoch;  // 0-based
  int64_t first;  // the batch it starts at: a run resumed inside an epoch starts after its
                  // checkpoint's
  std::chrono::steady_clock::time_point start;
  ProgressBar bar;
  double running_loss = 0, epoch_loss = 0;
  // Deferred losses (Trainer::defer_loss_), not yet read or added to the sums above.
  struct Pending {
    Tensor loss;            // 0-d, on the device
    Tensor parts;           // detect's parts (the task's last_loss_parts_unread), or undefined
    double parts_scale = 1;
    int64_t step = 0;       // the batch's index in the epoch
    int64_t batch_size = 0;
  };
  std::vector<Pending> pending;
  LossPartSums parts;  // detect's box, cls, dfl
  int64_t steps;       // batches done, counting those before a resumed checkpoint
  double wait = 0;     // seconds the training thread waited for batches
  int64_t images = 0;  // images this rank read
};

// The trainer in named steps, as Ultralytics' BaseTrainer: set-up (_setup_train: the recipe, the
// process group, the data, the model, the optimizer, the replicas, the loaders, the run folder),
// then epochs of optimizer steps, each complete epoch validated and saved. One object per
// run_training call; the floating-point work happens in the order of the one function it was.
class Trainer {
 public:
  using Clock = std::chrono::steady_clock;
  Trainer(const TrainConfig& cfg, std::ostream& out_all) : cfg_(cfg), out_all_(out_all) {}
  TrainResult run();

 private:
  // ---- set-up
  void read_recipe();
  void join_process_group();
  void use_cuda_backend();
  void backward(const Tensor& loss);
  void restore_counters();
  void open_data();
  void build_model();
  std::unique_ptr<optim::Optimizer> make_optimizer(const nn::NamedTensors& params,
                                                   double weight_decay) const;
  void build_optimizer();
  void restore_checkpoint();
  void sync_replicas();
  void build_loaders();
  void prepare_run_directory();
  void start_metrics();
  // ---- training
  void set_rates(int64_t step, int64_t steps_per_epoch);
  void refresh_train_loader(int64_t epoch);
  bool next_batch(EpochState& e, data::Batch& batch);
  bool run_epoch(int64_t epoch);
  bool train_step(EpochState& e, data::Batch& batch, int64_t i);
  bool loss_is_usable(EpochState& e, double loss, int64_t i);
  bool accumulation_done() const;
  void optimizer_step();
  void log_loss(EpochState& e, int64_t i);
  bool after_step(EpochState& e, int64_t i);
  nlohmann::json epoch_record(EpochState& e, double seconds);
  void end_epoch(EpochState& e, nlohmann::json& rec, double seconds);
  struct Validation {
    bool improved = false;
    std::string text;  // "  val_accuracy 52.10%", "" without a val split
  };
  Validation validate(int64_t epoch, nlohmann::json& rec);
  void save_checkpoint(int64_t epoch_step, double epoch_loss, double running_loss);
  void print_epoch_line(const EpochState& e, const nlohmann::json& rec, const Validation& v,
                        double seconds);
  TrainResult finish();

  TrainConfig cfg_;
  std::ostream& out_all_;
  std::ostream null_out_{nullptr};  // other ranks print nothing
  std::ostream* out_ = nullptr;
  std::optional<RunFile> ckpt_;  // --resume's, until its state is restored
  FailPoint fail_at_;
  Device device_;
  dist::ProcessGroup* pg_ = nullptr;
  std::unique_ptr<dist::ProcessGroup> nccl_;  // over dist::world(), when CUDA ranks use NCCL
  int rank_ = 0, world_ = 1;
  bool lead_ = true;
  RunLock run_lock_;
  std::string out_flag_;
  TrainState st_;
  std::unique_ptr<task::Task> task_;
  Data data_;
  std::shared_ptr<nn::Module> model_;
  ModelMeta meta_;
  nn::NamedTensors trainable_;
  ResolvedOptimizer resolved_opt_;
  optim::LrSchedule schedule_;
  std::unique_ptr<optim::Optimizer> opt_;
  optim::GroupedOptimizer* groups_ = nullptr;  // opt_ with --param-groups
  std::unique_ptr<optim::EMA> ema_;
  std::unique_ptr<dist::GradReducer> reducer_;
  task::Task::StepRanks step_ranks_;
  data::DataLoaderOptions loader_options_;
  std::string loader_transform_;  // the training loader's transforms, as text
  std::unique_ptr<data::DataLoader> loader_, val_loader_;
  std::string ckpt_path_, model_path_, best_path_;
  int64_t resume_epoch_ = 0, resume_step_ = 0;
  std::unique_ptr<RunMetrics> metrics_;
  bool show_bar_ = false;
  TrainResult res_;
  Clock::time_point start_;
  int stopped_by_ = 0;  // SIGINT or SIGTERM, once one has stopped the run
  bool stop_ = false, partial_ = false;
  int64_t skipped_in_a_row_ = 0;  // --nan-policy skip
  // No wait for the device inside a step: the losses stay on the device and are read (and checked
  // for a non-finite value) when a loss line is printed, a checkpoint written or the epoch ends.
  // On CUDA for one rank with --nan-policy stop and a loss of one part (classify, segment);
  // HPCNET_DEFER_LOSS=1 forces it (the CPU tests), =0 turns it off.
  bool defer_loss_ = false;
  void read_losses(EpochState& e);
  // Batches reach the GPU through pinned host buffers, asynchronously (CUDA only).
  std::unique_ptr<PinnedUploader> uploader_;
  // --cuda-graph: the step captured once and replayed (graph_usable says where).
  struct StepGraph {
    CudaGraph graph;
    data::Batch inputs;  // the graph's input buffers, on the device
    Tensor loss;         // the captured step's loss, rewritten by each replay
    // The learning rate and momentum the graph's SGD kernel was given (kernel arguments).
    std::pair<double, double> rates{-1, -1};
    int captures = 0;
    bool off = false;    // given up (a failed capture, or the rate keeps changing)
  };
  StepGraph graph_;
  bool graph_usable(const data::Batch& batch);
  bool graph_step(EpochState& e, data::Batch& batch, int64_t i);
  bool end_step(EpochState& e, const data::Batch& batch, int64_t i);
};

TrainResult Trainer::run() {
  read_recipe();
  join_process_group();
  restore_counters();
  task_ = task::make_task(resolved_task(cfg_), task_options(cfg_));
  defer_loss_ = defers_losses(cfg_, device_, *task_, fail_at_);
  res_.deferred_loss_reads = defer_loss_;
  open_data();
  build_model();
  build_optimizer();
  restore_checkpoint();
  sync_replicas();
  build_loaders();
  prepare_run_directory();
  const StopSignals signals;
  start_metrics();
  model_->train();
  start_ = Clock::now();
  for (int64_t epoch = st_.epochs_done; epoch < cfg_.epochs && !stop_; ++epoch)
    if (!run_epoch(epoch)) break;
  return finish();
}

// Resume state is read (once) and checked, and the run's recipe merged in, before anything is
// written.
void Trainer::read_recipe() {
  if (!cfg_.resume.empty())
    ckpt_ = read_resume(cfg_);
  else
    apply_task_defaults(cfg_);  // the unset fields: the task's defaults (Ultralytics' for detect)
  train::validate(cfg_);
  data::set_max_image_pixels(cfg_.max_image_pixels);  // before any dataset is read
  check_run_directory(cfg_);
  fail_at_ = parse_fail_at(cfg_.fail_at);
  device_ = resolve_device(cfg_.device);
}

// Data parallelism: this process's place in the group (rank 0 of 1 without a launcher).
void Trainer::join_process_group() {
  pg_ = &dist::world();
  rank_ = pg_->rank();
  world_ = pg_->world_size();
  lead_ = rank_ == 0;
  out_ = lead_ ? &out_all_ : &null_out_;
  // One writer per run folder (rank 0's): an existing folder is locked at once, before the data
  // is read, so a second `--exist-ok` or `--resume` of a run still training is refused before
  // it touches anything; a new folder is locked when it is created (prepare_run_directory).
  out_flag_ = (cfg_.resume.empty() ? "--out " : "--resume ") + cfg_.out;
  if (std::error_code ec; lead_ && fs::is_directory(cfg_.out, ec))
    run_lock_.acquire(cfg_.out, out_flag_);
  // One GPU per local rank (--device cuda without an index; ranks beyond the node's GPUs share
  // them round-robin).
  if (world_ > 1 && (cfg_.device == "cuda" || cfg_.device == "auto") && device_.is_cuda()) {
    device_ = cuda_device(pg_->local_rank() % cuda_device_count());
  }
  HPCNET_REQUIRE(cfg_.dist_backend != "nccl" || device_.is_cuda(),
                 "--dist-backend nccl needs --device cuda (CPU tensors go through MPI)");
  if (world_ > 1 && cfg_.dist_backend != "mpi") use_cuda_backend();
  if (cfg_.threads == 0 && pg_->local_size() > 1) {
    // Ranks sharing a node split its cores rather than each taking all of them.
    ops::set_num_threads(0);
    ops::set_num_threads(std::max(1, ops::get_num_threads() / pg_->local_size()));
  } else {
    ops::set_num_threads(cfg_.threads);
  }
}

// Ranks on CUDA devices reduce on the GPUs through NCCL where every rank can (a GPU of its own,
// told apart by UUID whatever CUDA_VISIBLE_DEVICES numbers it; the library loads), else through
// host copies (the host-staged MPI path). Every rank votes (CPU ranks too), so that all of them
// take the same path. SyncBatchNorm's statistics, summed on the host, go through MPI either way.
void Trainer::use_cuda_backend() {
  uint64_t gpu = 0;  // a hash of this rank's GPU's UUID (never 0), or 0 on the CPU
  if (device_.is_cuda()) {
    gpu = 1469598103934665603ULL;
    for (char c : cuda_device_uuid(device_.index))
      gpu = (gpu ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
    gpu |= 1;
  }
  int sharing = 0;
  for (uint64_t g : dist::allgather_u64(*pg_, gpu)) sharing += g == gpu ? 1 : 0;
  const std::string why = dist::nccl_unusable_on_this_rank(device_.is_cuda(), sharing);
  double able = why.empty() ? 1 : 0;
  pg_->allreduce_sum(&able, 1);
  const std::string backend =
      dist::choose_cuda_backend(cfg_.dist_backend, world_, static_cast<int>(able), why);
  if (backend == "nccl") {
    nccl_ = dist::make_nccl_group(*pg_, device_.index);
    pg_ = nccl_.get();
  } else if (lead_ && device_.is_cuda() && !why.empty() && !cfg_.quiet) {
    *out_ << "gradients cross ranks through host copies (MPI): NCCL not used, " << why
          << std::endl;
  }
}

void Trainer::restore_counters() {
  if (!ckpt_) return;
  const TrainState& saved = *ckpt_->train;
  st_.epochs_done = saved.epochs_done;
  st_.steps = saved.steps;
  st_.optimizer_steps = saved.optimizer_steps;
  st_.last_opt_step = saved.last_opt_step;
  st_.epoch_step = saved.epoch_step;
  st_.best = saved.best;
  if (rank_ == 0) {  // the loss sums are all ranks' (see save_checkpoint): rank 0 carries them
    st_.epoch_loss = saved.epoch_loss;
    st_.running_loss = saved.running_loss;
  }
}

// The data (load_data), checked against the checkpoint being resumed.
void Trainer::open_data() {
  data_ = load_data(cfg_, *pg_, *task_);
  if (!cfg_.quiet)
    for (const std::string& note : data_.notes) *out_ << note << std::endl;
  if (ckpt_ && !ckpt_->meta.classes.empty() && ckpt_->meta.classes != data_.classes) {
    ModelMeta here = ckpt_->meta;
    here.classes = data_.classes;
    const bool names = here.classes.size() == ckpt_->meta.classes.size();
    throw InputError(ckpt_->path + " holds " + describe_run(ckpt_->meta, names) +
                     "; with --data " + cfg_.data + " it would be " + describe_run(here, names) +
                     ": resume it with the run's own data");
  }
  if (ckpt_) check_resume_data(*ckpt_, data_.record, lead_);
}

// The model, initialised from --seed (or --weights), on its device, with --freeze, --precision
// and --conv-algorithm applied; meta_ is what its files record.
void Trainer::build_model() {
  manual_seed(cfg_.seed);
  nn::ModelOptions options{static_cast<int64_t>(data_.classes.size()), cfg_.aux_loss};
  options.zero_init_residual = cfg_.zero_init_residual;
  model_ = nn::make_model(cfg_.model, options);
  HPCNET_REQUIRE(data_.train->target_kind() == task_->target_kind(),
                 "--task " + task_->name() + " needs a dataset of " +
                     data::target_kind_name(task_->target_kind()) + " targets; --dataset " +
                     cfg_.dataset + " holds " +
                     data::target_kind_name(data_.train->target_kind()));
  if (!cfg_.weights.empty() && !ckpt_) load_initial_weights(cfg_, *model_, lead_);
  if (!cfg_.encoder_weights.empty() && !ckpt_) load_encoder_weights(cfg_, *model_, lead_);
  meta_.model = cfg_.model;
  meta_.task = task_->name();
  meta_.classes = data_.classes;
  meta_.imgsz = task_->options().imgsz;
  if (task_->options().augment == "imagenet" || task_->options().segment.imagenet_normalize)
    meta_.eval_policy = "imagenet";
  meta_.val_split = cfg_.val_split;
  meta_.normalize = task_->eval_transform().normalization();
  model_->to_(device_);
  trainable_ = apply_freeze(cfg_, *model_);
  apply_precision(cfg_.precision, device_);
  apply_cuda_math(cfg_.tf32, cfg_.deterministic);
  apply_conv_algorithm(cfg_.conv_algorithm);
}

std::unique_ptr<optim::Optimizer> Trainer::make_optimizer(const nn::NamedTensors& params,
                                                          double weight_decay) const {
  const ResolvedOptimizer& chosen = resolved_opt_;
  if (chosen.name == "AdamW")
    return std::make_unique<optim::AdamW>(
        params,
        optim::AdamWOptions{chosen.lr, chosen.momentum, cfg_.beta2, cfg_.adam_eps, weight_decay});
  return std::make_unique<optim::SGD>(
      params,
      optim::SGDOptions{chosen.lr, chosen.momentum, cfg_.dampening, weight_decay, chosen.nesterov});
}

// The optimizer (--optimizer auto: as Ultralytics chooses), its schedule, its parameter groups,
// and the EMA of the weights.
void Trainer::build_optimizer() {
  // --optimizer auto (Ultralytics): AdamW at a rate fitted to the class count for short runs.
  resolved_opt_ = resolve_optimizer(cfg_, data_.train->size(), data_.classes.size(), world_);
  const ResolvedOptimizer& chosen = resolved_opt_;
  if (lead_ && cfg_.optimizer == "auto" && !cfg_.quiet)
    *out_ << "optimizer: 'auto' chose " << chosen.name << "(lr=" << chosen.lr
          << ", momentum=" << chosen.momentum << ")"
          << (chosen.note.empty() ? "" : " " + chosen.note) << std::endl;
  schedule_ = make_schedule(cfg_);
  schedule_.lr = chosen.lr;
  if (cfg_.optimizer == "auto") schedule_.warmup_bias_lr = 0.0;  // as Ultralytics' auto
  if (cfg_.param_groups) {
    // Ultralytics' three groups: decayed weights, norm weights and biases (the last two without
    // weight decay), the decay scaled by the nominal batch.
    const auto g = optim::ultralytics_param_groups(*model_, trainable_);
    const double wd = chosen.weight_decay;
    auto grouped = std::make_unique<optim::GroupedOptimizer>(
        std::vector<nn::NamedTensors>{g[0], g[1], g[2]},
        [&](const nn::NamedTensors& p, size_t k) { return make_optimizer(p, k == 0 ? wd : 0.0); });
    groups_ = grouped.get();
    opt_ = std::move(grouped);
  } else {
    opt_ = make_optimizer(trainable_, chosen.weight_decay);
  }
  if (cfg_.ema_decay > 0)
    ema_ = std::make_unique<optim::EMA>(*model_, cfg_.ema_decay, cfg_.ema_tau);
}

// --resume: the weights, optimizer and EMA state, pending gradients and the random state of the
// checkpoint (whose memory is then released).
void Trainer::restore_checkpoint() {
  if (!ckpt_) return;
  try {
    model_->load_state_dict(ckpt_->model);
    opt_->load_state_dict(ckpt_->optim, st_.optimizer_steps);
    if (ema_) {
      ema_->load_state_dict(ckpt_->ema);
      ema_->set_updates(st_.optimizer_steps);  // one EMA update per optimizer step
    }
    restore_accumulated_grads(*ckpt_, trainable_, device_, st_);
  } catch (const InputError& e) {
    throw InputError(ckpt_->path + ": " + e.what());
  }
  check_resume_folder(*ckpt_, cfg_.out);  // not a checkpoint copied into another run's folder
  default_rng().set_state(ckpt_->train->rng);
  if (lead_ && ckpt_->train->world_size != world_)
    std::fprintf(stderr,
                 "hpcnet: resuming a run of %d ranks on %d: the global batch is now %lld "
                 "(%d x %lld per rank)\n",
                 ckpt_->train->world_size, world_, static_cast<long long>(world_ * cfg_.batch_size),
                 world_, static_cast<long long>(cfg_.batch_size));
  ckpt_.reset();
  if (!cfg_.quiet && st_.epochs_done < cfg_.epochs)
    *out_ << "resuming " << cfg_.out << " from epoch " << st_.epochs_done + 1
          << (st_.epoch_step > 0 ? " step " + std::to_string(st_.epoch_step + 1) : std::string())
          << " (of " << cfg_.epochs << ")" << std::endl;
}

// Every replica starts from rank 0's state (ranks wait here for the slowest data loading, hence
// the longer timeout), and gradients are averaged over ranks in buckets during backward.
void Trainer::sync_replicas() {
  dist::ProcessGroup& pg = *pg_;
  // Sums doubles over the ranks (the loss normaliser of detect, SyncBatchNorm's statistics).
  const F::RankSum rank_sum = [group = pg_](double* d, size_t n) { group->allreduce_sum(d, n); };
  step_ranks_ = task::Task::StepRanks{world_, world_ > 1 ? rank_sum : F::RankSum{}, {}};
  if (world_ > 1 && pg.reduces_on_device())  // NCCL: detect's score sum stays on the GPUs
    step_ranks_.device_sum = [group = pg_](Tensor& t) { group->allreduce_sum(t); };
  if (world_ == 1) return;
  pg.set_timeout(cfg_.dist_timeout > 0 ? std::max(cfg_.dist_timeout, 600.0) : 0);
  for (auto& [n, t] : model_->state_dict()) pg.broadcast(t, 0);
  for (auto& [n, t] : opt_->state_dict()) pg.broadcast(t, 0);
  if (ema_)
    for (auto& [n, t] : ema_->state_dict()) pg.broadcast(t, 0);
  pg.set_timeout(cfg_.dist_timeout);
  std::vector<Tensor> trained;
  // Parameters the model itself keeps fixed (yolov8's DFL projection) have no gradient.
  for (const auto& [n, t] : trainable_)
    if (t.requires_grad()) trained.push_back(t);
  // --sync-bn: every BatchNorm normalises with the statistics of all ranks' batches.
  if (cfg_.sync_bn)
    for (auto& [name, m] : model_->named_modules())
      if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) bn->sync = rank_sum;
  reducer_ = std::make_unique<dist::GradReducer>(
      pg, trained, dist::ReducerOptions{static_cast<size_t>(cfg_.bucket_kb) * 1024});
}

// The data pipeline: the training loader (this rank's share of every epoch, the task's
// transforms) and the validation loader (this rank's slice of the val split).
void Trainer::build_loaders() {
  data::DataLoaderOptions& opts = loader_options_;
  opts.batch_size = cfg_.batch_size;
  opts.shuffle = true;
  opts.drop_last = false;
  opts.num_workers = cfg_.workers;
  // Small batches are cheap to hold: a deeper ring lets workers run ahead in bursts.
  opts.prefetch_factor = cfg_.workers > 0 ? std::max<int64_t>(2, 16 / cfg_.workers) : 2;
  opts.seed = cfg_.seed;
  opts.rank = rank_;  // DistributedSampler: this rank's share of every epoch
  opts.world_size = world_;
  opts.shuffle_buffer = cfg_.shuffle_buffer;  // > 0: shards streamed in turn through a buffer
  data::Compose first_tf = task_->train_transform(st_.epochs_done, cfg_.epochs);
  loader_transform_ = first_tf.str();
  loader_ = std::make_unique<data::DataLoader>(data_.train, std::move(first_tf), opts);
  if (!data_.val) return;
  data::DataLoaderOptions val_opts;
  val_opts.batch_size = task_->val_batch_size(cfg_.batch_size);
  val_opts.num_workers = std::min(cfg_.workers, 1);
  std::shared_ptr<const data::Dataset> val = data_.val;
  if (world_ > 1) {  // this rank's slice: positions rank, rank + W, ...
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < val->size(); i += world_) mine.push_back(i);
    val = std::make_shared<data::Subset>(val, std::move(mine));
  }
  val_loader_ = std::make_unique<data::DataLoader>(val, task_->eval_transform(), val_opts);
}

// The run folder (rank 0's): created and locked, temporary files of dead writers removed, and
// with --exist-ok the replaced run's model files and checkpoint.
void Trainer::prepare_run_directory() {
  if (lead_) {
    // An unusable --out is the user's to fix (exit 2), like bad data.
    std::error_code ec;
    fs::create_directories(cfg_.out, ec);
    if (ec || !fs::is_directory(cfg_.out))
      throw InputError("--out " + cfg_.out + ": cannot create the run directory (" +
                       (ec ? ec.message() : std::string("not a directory")) + ")");
    run_lock_.acquire(cfg_.out, out_flag_);
    // Temporary files of writers that died mid-write (NAME.tmp.PID of a process that is gone).
    for (const auto& e : fs::directory_iterator(cfg_.out, ec)) {
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
    if (cfg_.resume.empty())
      for (const char* f : {"checkpoint.safetensors", "model.safetensors", "best.safetensors"})
        fs::remove(fs::path(cfg_.out) / f, ec);
  }
  ckpt_path_ = (fs::path(cfg_.out) / "checkpoint.safetensors").string();
  model_path_ = (fs::path(cfg_.out) / "model.safetensors").string();
  best_path_ = (fs::path(cfg_.out) / "best.safetensors").string();
}

// metrics.jsonl, metrics.csv and the TensorBoard events, kept by rank 0 alone, opened with the
// run's "start" record.
void Trainer::start_metrics() {
  resume_epoch_ = st_.epochs_done;
  resume_step_ = st_.epoch_step;
  metrics_ = std::make_unique<RunMetrics>(
      lead_, cfg_.out, st_.epochs_done > 0 || st_.epoch_step > 0,
      RunMetricKeys{task_->make_metric(data_.classes)->value_keys(), task_->loss_part_names()});
  nlohmann::json rec = {{"event", "start"},
                        {"config", recipe_json(cfg_)},
                        {"train_images", data_.train->size()},
                        {"val_images", data_.val ? data_.val->size() : 0},
                        {"start_epoch", st_.epochs_done + 1},
                        {"threads", ops::get_num_threads()},
                        {"deferred_loss_reads", defer_loss_}};
  if (!cfg_.freeze.empty()) {
    int64_t n = 0;
    for (const auto& [name, t] : trainable_) n += t.numel();
    rec["trainable_parameters"] = n;
    rec["frozen_parameters"] = model_->num_parameters() - n;
  }
  if (world_ > 1) {
    rec["world_size"] = world_;
    rec["dist_backend"] = pg_->backend();
    rec["global_batch_size"] = world_ * cfg_.batch_size;
    rec["allreduce_floats_per_step"] = reducer_->num_floats();
    rec["allreduce_buckets"] = reducer_->num_buckets();
  }
  metrics_->write(rec, st_.steps);
  show_bar_ = lead_ && show_progress_bar(cfg_.progress, stdout_is_tty(), under_launcher());
  res_.world_size = world_;
}

// The per-step rates (and SGD momentum during Ultralytics' warm-up) of every group.
void Trainer::set_rates(int64_t step, int64_t steps_per_epoch) {
  if (!groups_) {
    opt_->set_lr(schedule_.lr_at(step, steps_per_epoch, cfg_.epochs));
    if (auto* sgd = dynamic_cast<optim::SGD*>(opt_.get()))
      sgd->set_momentum(schedule_.momentum_at(step, steps_per_epoch, cfg_.epochs, cfg_.momentum));
    return;
  }
  for (size_t k = 0; k < groups_->num_groups(); ++k) {
    optim::Optimizer& o = groups_->group(k);
    o.set_lr(schedule_.group_lr_at(step, steps_per_epoch, cfg_.epochs, k == 2));
    if (auto* sgd = dynamic_cast<optim::SGD*>(&o))
      sgd->set_momentum(schedule_.momentum_at(step, steps_per_epoch, cfg_.epochs, cfg_.momentum));
  }
}

// detect's close_mosaic: the epoch's transforms, when they changed, make a new training loader.
void Trainer::refresh_train_loader(int64_t epoch) {
  data::Compose tf = task_->train_transform(epoch, cfg_.epochs);
  std::string text = tf.str();
  if (text == loader_transform_) return;
  loader_transform_ = std::move(text);
  loader_ = std::make_unique<data::DataLoader>(data_.train, std::move(tf), loader_options_);
  if (!cfg_.quiet) *out_ << "epoch " << epoch + 1 << ": " << loader_transform_ << std::endl;
}

// The next batch of the epoch, timing how long the step waits for data.
bool Trainer::next_batch(EpochState& e, data::Batch& batch) {
  auto t0 = Clock::now();
  bool more = loader_->next(batch);
  const double w = std::chrono::duration<double>(Clock::now() - t0).count();
  res_.data_wait_seconds += w;
  e.wait += w;
  e.images += more ? batch.size : 0;
  // The bar says so when the loader, not the model, sets the pace.
  const double so_far = std::chrono::duration<double>(Clock::now() - e.start).count();
  e.bar.set_note(so_far > 2 && e.wait > 0.2 * so_far
                     ? "data-bound: waiting " +
                           std::to_string(static_cast<int>(100 * e.wait / so_far)) +
                           "%, add --workers or --cache"
                     : "");
  return more;
}

// One epoch: its batches, then, when it is complete, validation and saving (end_epoch). Returns
// false when the run stopped inside it (a partial epoch, not checkpointed here).
bool Trainer::run_epoch(int64_t epoch) {
  const Clock::time_point start = Clock::now();
  refresh_train_loader(epoch);
  const int64_t first = epoch == resume_epoch_ ? resume_step_ : 0;
  data::DataLoader& loader = *loader_;
  loader.begin_epoch(epoch, first);
  EpochState e(epoch, first, start, show_bar_, cfg_.epochs, loader.num_batches(),
               world_ * cfg_.batch_size, task_->loss_part_names());
  if (first) {
    e.running_loss = st_.running_loss;
    e.epoch_loss = st_.epoch_loss;
  }
  data::Batch batch;
  for (int64_t i = first; next_batch(e, batch); ++i)
    if (train_step(e, batch, i)) {
      stop_ = true;
      break;
    }
  read_losses(e);
  // The step limit may fall on the epoch's last batch: that epoch is complete.
  partial_ = stop_ && e.steps < loader.num_batches();
  e.bar.clear();
  const double seconds = std::chrono::duration<double>(Clock::now() - e.start).count();
  res_.train_seconds += seconds;
  nlohmann::json rec = epoch_record(e, seconds);
  if (partial_) return false;  // a partial epoch is not checkpointed (a signal's was, in it)
  st_.epochs_done = epoch + 1;
  end_epoch(e, rec, seconds);
  return true;
}

// One batch: forward, the task's loss, backward and, once the accumulation is complete, the
// optimizer step; then the loss sums, the loss line and the step's checkpoint. Returns true when
// the run stops after it.
bool Trainer::train_step(EpochState& e, data::Batch& batch, int64_t i) {
  const bool nan_now = fail_at_.rank == rank_ && res_.steps + 1 >= fail_at_.step &&
                       fail_at_.mode == "nan";  // this rank's loss, from that step on
  if (fail_at_.rank == rank_ && res_.steps + 1 == fail_at_.step && fail_at_.mode != "nan")
    fail_now(fail_at_);
  set_rates(st_.steps, loader_->num_batches());
  if (graph_usable(batch)) return graph_step(e, batch, i);
  if (!device_.is_cpu()) {
    if (pinned_uploads() && !uploader_) uploader_ = std::make_unique<PinnedUploader>();
    auto to_device = [&](const Tensor& t) {
      return pinned_uploads() ? uploader_->upload(t, device_) : t.to(device_);
    };
    batch.images = to_device(batch.images);
    batch.labels = to_device(batch.labels);
    if (batch.masks.defined()) batch.masks = to_device(batch.masks);
  }
  Tensor loss = task_->train_loss(model_->forward_all(batch.images), batch, step_ranks_);
  if (defer_loss_) {
    const auto [parts, scale] = task_->last_loss_parts_unread();
    e.pending.push_back({loss.detach(), parts, scale, i, batch.size});
    backward(loss);
    if (accumulation_done()) optimizer_step();
    return end_step(e, batch, i);
  }
  // Checked before the step, so the weights are still the last finite ones.
  double l = task_->train_loss_for_log(loss.item(), batch, step_ranks_);
  if (nan_now) l = std::numeric_limits<double>::quiet_NaN();
  const bool skipped = !loss_is_usable(e, l, i);  // --nan-policy skip dropped this batch
  if (!skipped) backward(loss);
  if (!skipped && accumulation_done()) optimizer_step();
  if (!skipped) {  // a skipped batch adds nothing to the loss sums
    e.running_loss += l;
    e.epoch_loss += l;
    e.parts.add(task_->last_loss_parts());
  }
  return end_step(e, batch, i);
}

// --cuda-graph: a step is replayed from a graph where what the graph fixed holds: CUDA, one rank
// (the gradient all-reduce is not captured), a loss of one part (classify, segment: detect packs
// its targets on the host), deferred losses (no host read inside the step), SGD with every step
// an optimizer step (no accumulation), no gradient clipping, no EMA, no dropout (its masks are
// drawn on the host), one parameter group, the momentum buffers made (the first step makes them
// eagerly), and the shape of the captured batch (a last, smaller batch runs eagerly). A new
// learning rate or momentum is a new capture (kernel arguments are fixed in a graph); the third
// change, or a capture that fails, ends the replays for the run, saying why once.
bool Trainer::graph_usable(const data::Batch& batch) {
  StepGraph& g = graph_;
  auto* sgd = dynamic_cast<optim::SGD*>(opt_.get());
  // (detect: its targets are packed on the host each step, which a replay would not redo)
  if (!cfg_.cuda_graph || g.off || !device_.is_cuda() || !defer_loss_ || ema_ || world_ > 1 ||
      cfg_.clip_grad_norm > 0 || !sgd || groups_ || st_.optimizer_steps < 1 ||
      !task_->loss_part_names().empty())
    return false;
  if (schedule_.accumulate_at(st_.steps, loader_->num_batches(), cfg_.epochs, cfg_.nbs,
                              world_ * cfg_.batch_size) != 1)
    return false;
  auto give_up = [&](const std::string& why) {
    g.off = true;
    g.graph.clear();
    if (lead_) std::fprintf(stderr, "hpcnet: --cuda-graph: eager steps from here on (%s)\n",
                            why.c_str());
    return false;
  };
  if (g.captures == 0)
    for (auto& [name, m] : model_->named_modules())
      if (dynamic_cast<nn::Dropout*>(m)) return give_up("the model has dropout (" + name + ")");
  const std::pair<double, double> rates{sgd->lr(), sgd->options().momentum};
  if (g.graph.captured() && g.rates == rates) {
    const bool same = batch.images.shape() == g.inputs.images.shape() &&
                      batch.labels.shape() == g.inputs.labels.shape() &&
                      batch.masks.defined() == g.inputs.masks.defined() &&
                      (!batch.masks.defined() || batch.masks.shape() == g.inputs.masks.shape());
    return same;
  }
  if (batch.size != cfg_.batch_size) return false;  // captured on full batches only
  if (g.captures == 3) return give_up("the learning rate or momentum changed a third time");
  // Capture on buffers of this batch's shapes.
  g.inputs = data::Batch();
  g.inputs.size = batch.size;
  g.inputs.images = Tensor::empty(batch.images.shape(), batch.images.dtype(), device_);
  g.inputs.labels = Tensor::empty(batch.labels.shape(), batch.labels.dtype(), device_);
  if (batch.masks.defined())
    g.inputs.masks = Tensor::empty(batch.masks.shape(), batch.masks.dtype(), device_);
  g.rates = rates;
  ++g.captures;
  const bool ok = g.graph.capture(device_, [&] {
    Tensor loss = task_->train_loss(model_->forward_all(g.inputs.images), g.inputs, step_ranks_);
    loss.backward();
    opt_->step();
    opt_->zero_grad();
    g.loss = loss.detach();
  });
  if (!ok) {
    // The gradients the capture's backward made hold what the recorded (never run) kernels
    // would have written: gone, so that the eager step does not add to them.
    model_->zero_grad(true);
    opt_->zero_grad(true);
    return give_up("the step could not be captured: " + g.graph.why());
  }
  if (lead_ && g.captures == 1)
    std::fprintf(stderr, "hpcnet: --cuda-graph: the step is captured; replaying it from step %lld\n",
                 static_cast<long long>(st_.steps + 1));
  return true;
}

// One replay: the batch copied into the graph's buffers (pinned, asynchronous), the graph
// queued, its loss copied aside for the deferred read; then the step's bookkeeping as
// train_step's.
bool Trainer::graph_step(EpochState& e, data::Batch& batch, int64_t i) {
  StepGraph& g = graph_;
  if (!uploader_) uploader_ = std::make_unique<PinnedUploader>();
  uploader_->upload_into(batch.images, g.inputs.images);
  uploader_->upload_into(batch.labels, g.inputs.labels);
  if (batch.masks.defined()) uploader_->upload_into(batch.masks, g.inputs.masks);
  g.graph.replay();
  e.pending.push_back({g.loss.clone(), Tensor(), 1.0, i, batch.size});
  st_.last_opt_step = st_.steps;
  ++st_.optimizer_steps;
  ++res_.graph_steps;
  return end_step(e, batch, i);
}

// After a step's work: the counters, the loss line (the deferred losses read first), the
// progress bar, and after_step's checkpoint and stop.
bool Trainer::end_step(EpochState& e, const data::Batch& batch, int64_t i) {
  ++e.steps;
  ++st_.steps;
  ++res_.steps;
  res_.images += batch.size * world_;  // batch b has the same size on every rank
  if ((i + 1) % cfg_.log_every == 0) {
    read_losses(e);
    log_loss(e, i);
  }
  e.bar.update(i + 1);
  return after_step(e, i);
}

// The deferred losses in step order (read with one copy: one wait for the device), checked and
// summed as train_step checks and sums them: the same sums, the same error naming the step of
// the first non-finite loss. The weights have taken the steps after it; the check runs before
// any checkpoint is written, so none holds them.
void Trainer::read_losses(EpochState& e) {
  std::vector<EpochState::Pending> pending;
  pending.swap(e.pending);
  if (pending.empty()) return;
  // Gathered on their device (queued copies: the losses, then each step's parts), then read with
  // one copy: one wait, not one each.
  const Device dev = pending.front().loss.device();
  const DType dtype = pending.front().loss.dtype();
  const int64_t n = static_cast<int64_t>(pending.size());
  const int64_t P = pending.front().parts.defined() ? pending.front().parts.numel() : 0;
  Tensor all = Tensor::empty({n * (1 + P)}, dtype, dev);
  const size_t size = dtype_size(dtype);
  auto put = [&](const Tensor& t0, int64_t at) {
    const Tensor t = t0.dtype() == dtype ? t0 : t0.to(dtype);
    HPCNET_CHECK(t.device() == dev && t.is_contiguous(),
                 "read_losses: a loss on another device than the others");
    cuda_copy_bytes(static_cast<char*>(all.raw_data()) + at * size, dev, t.raw_data(), dev,
                    t.nbytes());
  };
  for (int64_t k = 0; k < n; ++k) {
    const EpochState::Pending& p = pending[k];
    HPCNET_CHECK(p.loss.numel() == 1 && (P == 0 || p.parts.numel() == P),
                 "read_losses: a loss that is not a scalar, or parts of another count");
    put(p.loss, k);
    if (P > 0) put(p.parts, n + k * P);
  }
  const std::vector<double> values = all.to_vector_f64();
  data::Batch sized;  // train_loss_for_log divides by the batch size where the loss is a sum
  for (int64_t k = 0; k < n; ++k) {
    sized.size = pending[k].batch_size;
    const double l = task_->train_loss_for_log(values[k], sized, step_ranks_);
    loss_is_usable(e, l, pending[k].step);  // throws for a non-finite loss (--nan-policy stop)
    e.running_loss += l;
    e.epoch_loss += l;
    if (P == 0) continue;
    std::vector<double> parts(values.begin() + n + k * P, values.begin() + n + (k + 1) * P);
    for (double& v : parts) v *= pending[k].parts_scale;
    e.parts.add(parts);
  }
}

// Every rank stops at the same step, naming the ranks whose loss was not finite (one rank alone
// stopping would leave the others waiting in the gradient all-reduce); with --nan-policy skip
// the batch is dropped instead (false), up to 10 in a row.
bool Trainer::loss_is_usable(EpochState& e, double loss, int64_t i) {
  const std::string bad = nonfinite_ranks(*pg_, loss);
  const std::string where =
      "at epoch " + std::to_string(e.epoch + 1) + " step " + std::to_string(i + 1);
  if (!bad.empty() && cfg_.nan_policy == "skip" && skipped_in_a_row_ < 10) {
    // Dropped on every rank alike (they all saw the same verdict): no gradient, no step.
    ++skipped_in_a_row_;
    ++res_.skipped_steps;
    if (lead_) {
      e.bar.clear();
      std::fprintf(stderr,
                   "hpcnet: loss became %s %s: batch skipped (--nan-policy skip; %lld "
                   "so far)\n",
                   bad.c_str(), where.c_str(), static_cast<long long>(res_.skipped_steps));
    }
    metrics_->write({{"event", "skipped"},
                     {"epoch", e.epoch + 1},
                     {"step", i + 1},
                     {"loss", bad},
                     {"skipped_steps", res_.skipped_steps}},
                    st_.steps);
    return false;
  }
  if (!bad.empty()) {  // a failure of the run (exit 1), not of hpcnet
    throw Error("loss became " + bad + " " + where +
                (skipped_in_a_row_ ? " (and in the " + std::to_string(skipped_in_a_row_) +
                                         " batches before it, skipped)"
                                   : std::string()) +
                "; nothing after the last checkpoint is saved (" +
                (fs::exists(ckpt_path_) ? ckpt_path_ + " holds it" : std::string("none yet")) +
                "); lower --lr or use --clip-grad-norm");
  }
  skipped_in_a_row_ = 0;
  return true;
}

// loss.backward(), the gradients averaged over the ranks where there are several.
void Trainer::backward(const Tensor& loss) {
  if (reducer_)
    reducer_->backward(loss);
  else
    loss.backward();
}

// Ultralytics' accumulation (--nbs): gradients are summed over batches until those since the
// last optimizer step reach `accumulate`.
bool Trainer::accumulation_done() const {
  return st_.steps - st_.last_opt_step >=
         schedule_.accumulate_at(st_.steps, loader_->num_batches(), cfg_.epochs, cfg_.nbs,
                                 world_ * cfg_.batch_size);
}

// Ultralytics' optimizer_step: clip, step, zero the gradients and update the EMA.
void Trainer::optimizer_step() {
  if (cfg_.clip_grad_norm > 0) optim::clip_grad_norm(model_->parameters(), cfg_.clip_grad_norm);
  opt_->step();
  opt_->zero_grad();
  if (ema_) ema_->update(*model_);
  st_.last_opt_step = st_.steps;
  ++st_.optimizer_steps;
}

// The tutorial's loss line, "[1,  2000] loss: 2.187": the mean over the last log_every batches
// of every rank.
void Trainer::log_loss(EpochState& e, int64_t i) {
  e.bar.clear();
  if (world_ > 1) pg_->allreduce_sum(&e.running_loss, 1);  // the mean over every rank's batches
  double avg = e.running_loss / (cfg_.log_every * world_);
  char line[64];
  std::snprintf(line, sizeof line, "[%lld, %5lld] loss: %.3f", static_cast<long long>(e.epoch + 1),
                static_cast<long long>(i + 1), avg);
  if (!cfg_.quiet) *out_ << line << std::endl;
  res_.last_report_loss = avg;
  double el = std::chrono::duration<double>(Clock::now() - start_).count();
  metrics_->write({{"event", "log"},
                   {"epoch", e.epoch + 1},
                   {"step", i + 1},
                   {"loss", avg},
                   {"lr", opt_->lr()},
                   {"elapsed_s", el}},
                  st_.steps);
  e.running_loss = 0;
}

// A signal, or --save-every: the checkpoint of this step (at the epoch's last batch the epoch's
// own checkpoint follows; a signal then stops the run after it). Returns true to stop: a signal,
// or --steps reached.
bool Trainer::after_step(EpochState& e, int64_t i) {
  const int sig = agreed_stop_signal(*pg_);
  const bool last_batch = i + 1 == loader_->num_batches();
  if (!last_batch && (sig || (cfg_.save_every > 0 && st_.steps % cfg_.save_every == 0))) {
    read_losses(e);
    save_checkpoint(i + 1, e.epoch_loss, e.running_loss);
  }
  if (sig) {
    stopped_by_ = sig;
    return true;
  }
  return cfg_.max_steps > 0 && res_.steps >= cfg_.max_steps;
}

// The epoch's record for metrics.jsonl, the loss sums reduced over the ranks.
nlohmann::json Trainer::epoch_record(EpochState& e, double seconds) {
  if (world_ > 1) pg_->allreduce_sum(&e.epoch_loss, 1);
  nlohmann::json rec = {
      {"event", "epoch"},
      {"epoch", e.epoch + 1},
      {"steps", e.steps},
      {"train_loss", e.steps ? e.epoch_loss / (e.steps * world_) : 0.0},
      {"seconds", seconds},
      {"images_per_sec", seconds > 0 ? e.steps * cfg_.batch_size * world_ / seconds : 0},
      {"data_wait_seconds", e.wait},
      {"data_wait_share", seconds > 0 ? e.wait / seconds : 0.0}};
  {  // each rank's share of the images read (DistributedSampler): one number per rank
    std::vector<double> per_rank(static_cast<size_t>(world_), 0.0);
    per_rank[static_cast<size_t>(rank_)] = static_cast<double>(e.images);
    if (world_ > 1) pg_->allreduce_sum(per_rank.data(), per_rank.size());
    rec["images_read_per_rank"] = per_rank;
  }
  e.parts.put_means(rec, "train_", *pg_);
  return rec;
}

// A complete epoch's end: the replicas checked, validation, the model files and the checkpoint
// (Ultralytics' validate and save_model), the epoch line.
void Trainer::end_epoch(EpochState& e, nlohmann::json& rec, double seconds) {
  // Replicas must be identical; a cheap fingerprint check catches a transport or ordering bug.
  dist::check_same_on_all_ranks(*pg_, model_->parameters(),
                                "model parameters after epoch " + std::to_string(e.epoch + 1));
  // With an EMA, evaluation and the model files use the averaged weights.
  if (ema_) ema_->swap(*model_);
  // Without --sync-bn each rank's BatchNorm statistics follow its own batches: every rank
  // evaluates with rank 0's, the ones saved (DDP broadcasts them at every forward).
  if (world_ > 1)
    for (auto& [n, t] : model_->named_buffers()) pg_->broadcast(t, 0);
  const Validation v = validate(e.epoch, rec);
  rec["lr"] = opt_->lr();
  metrics_->write(rec, st_.steps);
  // The model files first, the checkpoint last: killed in between, a resume redoes the epoch.
  if (lead_) save_model(model_path_, *model_, meta_);
  if (lead_ && v.improved) save_model(best_path_, *model_, meta_);  // by the validation metric
  if (ema_) ema_->swap(*model_);
  save_checkpoint(0, 0, 0);
  if (!cfg_.quiet) print_epoch_line(e, rec, v, seconds);
}

// The task's metric and loss over the val split (every rank its slice), into rec; the best
// value so far is kept in the run state.
Trainer::Validation Trainer::validate(int64_t epoch, nlohmann::json& rec) {
  Validation v;
  if (!val_loader_) return v;
  task::LossSum val_loss;
  // The screen is not blank while validation runs: a bar of its own, erased at the end.
  ProgressBar val_bar(show_bar_,
                      "val " + std::to_string(epoch + 1) + "/" + std::to_string(cfg_.epochs),
                      val_loader_->num_batches(), world_ * val_loader_->options().batch_size);
  // Validation's tensors have other shapes than training's (no graph, often another batch
  // size), so the CPU allocator's cached blocks of one fit the other badly: held across,
  // they add up (a U-Net epoch side by side with smp, validating at batch 64, peaked at
  // 2,789 MB against 2,518). Handing them back on both sides makes the peak the larger of
  // the two, for one step of fresh allocations after each validation.
  cpu_allocator_release_cached();
  std::unique_ptr<task::Metric> ev =
      evaluate_sharded(*pg_, *task_, *model_, *val_loader_, &val_loss,
                       [&](int64_t done) { val_bar.update(done); });
  cpu_allocator_release_cached();
  val_bar.clear();
  rec["val_loss"] = val_loss.mean();
  put_named(rec, "val_", task_->loss_part_names(), val_loss.part_means());
  res_.val_accuracy = ev->value();
  put_named(rec, "", ev->value_keys(), ev->values());
  v.improved = std::isfinite(ev->value()) && (!st_.best || ev->value() > *st_.best);
  if (v.improved) st_.best = ev->value();
  v.text = "  " + ev->value_text();
  return v;
}

// The checkpoint of the run as it stands (every rank calls this: the loss sums are reduced).
void Trainer::save_checkpoint(int64_t epoch_step, double epoch_loss, double running_loss) {
  double sums[2] = {epoch_loss, running_loss};
  if (world_ > 1) pg_->allreduce_sum(sums, 2);
  if (!lead_) return;
  st_.rng = default_rng().state();
  st_.recipe = recipe_json(cfg_);
  st_.data = data_.record;
  st_.world_size = world_;
  st_.epoch_step = epoch_step;
  st_.epoch_loss = sums[0];
  st_.running_loss = sums[1];
  // Between two optimizer steps of an accumulation the gradients summed so far go along.
  nn::NamedTensors grads;
  if (st_.last_opt_step < st_.steps - 1)
    for (const auto& [n, t] : trainable_)
      if (t.grad().defined()) grads.emplace_back(n, t.grad());
  write_checkpoint(ckpt_path_, meta_, model_->state_dict(), opt_->state_dict(),
                   ema_ ? ema_->state_dict() : nn::NamedTensors{}, st_, grads);
}

// "epoch 1/2  train_loss 1.234  val_accuracy 52.10%  lr 0.0010  12.3 s  data wait 15%".
void Trainer::print_epoch_line(const EpochState& e, const nlohmann::json& rec,
                               const Validation& v, double seconds) {
  char line[200];
  const double lr = opt_->lr();
  std::snprintf(line, sizeof line, "epoch %lld/%lld  train_loss %.3f%s  lr %s  %.1f s",
                static_cast<long long>(e.epoch + 1), static_cast<long long>(cfg_.epochs),
                rec["train_loss"].get<double>(), v.text.c_str(),
                (lr != 0 && lr < 1e-3 ? fmt_lr("%.2e", lr) : fmt_lr("%.4f", lr)).c_str(), seconds);
  *out_ << line;
  // Waiting for data is worth a word only when it is a real part of the epoch.
  if (seconds > 0 && e.wait >= 0.1 * seconds)
    *out_ << "  data wait " << static_cast<int>(100 * e.wait / seconds) << "%";
  *out_ << std::endl;
}

// The run's end: a partial epoch's model file, the "end" record, and after a signal the
// "stopped" record and how to continue.
TrainResult Trainer::finish() {
  if (partial_ && !stopped_by_ && lead_) {
    if (ema_) ema_->swap(*model_);
    save_model(model_path_, *model_, meta_);
    if (ema_) ema_->swap(*model_);
  }
  const TrainResult& r = res_;
  metrics_->write({{"event", "end"},
                   {"steps", r.steps},
                   {"images", r.images},
                   {"train_seconds", r.train_seconds},
                   {"images_per_sec", r.train_seconds > 0 ? r.images / r.train_seconds : 0.0},
                   {"last_report_loss", r.last_report_loss},
                   {"val_accuracy", r.val_accuracy},
                   {"data_wait_seconds", r.data_wait_seconds}},
                  st_.steps);
  if (stopped_by_) {
    res_.exit_code = 128 + stopped_by_;
    const char* signame = stopped_by_ == SIGTERM ? "SIGTERM" : "SIGINT";
    const int64_t at_epoch = st_.epochs_done + (st_.epoch_step > 0 ? 1 : 0);
    metrics_->write({{"event", "stopped"},
                     {"signal", signame},
                     {"epoch", at_epoch},
                     {"epoch_step", st_.epoch_step},
                     {"steps", st_.steps}},
                    st_.steps);
    if (lead_)
      std::fprintf(stderr,
                   "hpcnet: %s: stopped after step %lld (epoch %lld); %s holds it: continue with "
                   "hpcnet train --resume %s\n",
                   signame, static_cast<long long>(st_.steps), static_cast<long long>(at_epoch),
                   ckpt_path_.c_str(), cfg_.out.c_str());
    return res_;
  }
  if (!cfg_.quiet) *out_ << "Finished Training" << std::endl;
  return res_;
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, std::ostream& out) {
  return Trainer(cfg, out).run();
}

}  // namespace hpcnet::train
