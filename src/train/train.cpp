// The training loop behind `hpcnet train`: the tutorial's program (data -> model -> cross-entropy
// -> backward -> SGD, loss lines every log_every mini-batches), plus checkpoints after every
// epoch, exact resume, metrics.jsonl and a progress bar on terminals; data-parallel over the ranks
// of dist::world() (DistributedSampler shares, bucketed gradient all-reduce, rank 0 writes).
#include "hpcnet/train.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "hpcnet/dist.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/ops.h"
#include "src/train/progress.h"

namespace fs = std::filesystem;

namespace hpcnet::train {
namespace {

constexpr const char* kCheckpointFormat = "hpcnet-checkpoint-1";

optim::LrSchedule make_schedule(const TrainConfig& c) {
  optim::LrSchedule s;
  s.kind = c.lr_schedule;
  s.lr = c.lr;
  s.milestones = c.milestones;
  s.gamma = c.lr_gamma;
  s.eta_min = c.lr_min;
  s.warmup_epochs = c.warmup_epochs;
  s.validate();
  return s;
}

void validate(const TrainConfig& c) {
  HPCNET_REQUIRE(c.epochs >= 1, "--epochs must be at least 1 (got " + std::to_string(c.epochs) + ")");
  HPCNET_REQUIRE(c.batch_size >= 1,
                 "--batch-size must be at least 1 (got " + std::to_string(c.batch_size) + ")");
  HPCNET_REQUIRE(std::isfinite(c.lr) && c.lr >= 0,
                 "--lr must be a non-negative number (got " + std::to_string(c.lr) + ")");
  HPCNET_REQUIRE(c.momentum >= 0 && c.momentum < 1 + 1e-12,
                 "--momentum must be in [0, 1] (got " + std::to_string(c.momentum) + ")");
  HPCNET_REQUIRE(c.weight_decay >= 0, "--weight-decay must be >= 0");
  HPCNET_REQUIRE(c.dampening >= 0 && c.dampening <= 1, "--dampening must be in [0, 1]");
  HPCNET_REQUIRE(c.workers >= 0 && c.workers <= 64, "--workers must be in [0, 64]");
  HPCNET_REQUIRE(c.threads >= 0, "--threads must be >= 0 (0 = all cores)");
  HPCNET_REQUIRE(c.log_every >= 1, "--log-every must be at least 1");
  HPCNET_REQUIRE(c.val_split >= 0, "--val-split must be >= 0");
  HPCNET_REQUIRE(c.max_steps >= 0, "--steps must be >= 0");
  HPCNET_REQUIRE(c.dataset == "cifar10" || c.dataset == "imagefolder",
                 "unknown dataset '" + c.dataset + "' (known: cifar10, imagefolder)");
  HPCNET_REQUIRE(!c.data.empty(), "--data is required: the dataset folder or archive");
  HPCNET_REQUIRE(!c.out.empty(), "--out is required: the run directory to write");
  HPCNET_REQUIRE(c.dist_timeout >= 0, "--dist-timeout must be >= 0 (0 = wait forever)");
  HPCNET_REQUIRE(c.bucket_kb >= 0, "--bucket-kb must be >= 0 (0 = one all-reduce per step)");
  HPCNET_REQUIRE(c.label_smoothing >= 0 && c.label_smoothing <= 1,
                 "--label-smoothing must be in [0, 1]");
  HPCNET_REQUIRE(c.optimizer == "sgd" || c.optimizer == "adamw",
                 "--optimizer must be sgd or adamw (got '" + c.optimizer + "')");
  HPCNET_REQUIRE(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1,
                 "--beta1 and --beta2 must be in [0, 1)");
  HPCNET_REQUIRE(c.adam_eps >= 0, "--adam-eps must be >= 0");
  HPCNET_REQUIRE(c.clip_grad_norm >= 0, "--clip-grad-norm must be >= 0 (0 = off)");
  HPCNET_REQUIRE(c.ema_decay == 0 || (c.ema_decay > 0 && c.ema_decay < 1),
                 "--ema-decay must be in (0, 1), e.g. 0.999 (0 = off)");
  HPCNET_REQUIRE(c.cutout >= 0 && c.cutout <= 32, "--cutout must be in [0, 32] pixels (0 = off)");
  HPCNET_REQUIRE(c.precision == "fp32" || c.precision == "bf16",
                 "--precision must be fp32 or bf16 (got '" + c.precision + "')");
  nn::make_model(c.model);  // throws for unknown models
  make_schedule(c);         // throws for a bad schedule
}


nlohmann::json config_json(const TrainConfig& c) {
  return {{"model", c.model},         {"dataset", c.dataset},     {"data", c.data},
          {"epochs", c.epochs},       {"batch_size", c.batch_size}, {"lr", c.lr},
          {"momentum", c.momentum},   {"dampening", c.dampening}, {"weight_decay", c.weight_decay},
          {"nesterov", c.nesterov},   {"seed", c.seed},           {"log_every", c.log_every},
          {"val_split", c.val_split}, {"augment", c.augment},     {"workers", c.workers},
          {"threads", c.threads},     {"lr_schedule", c.lr_schedule},
          {"milestones", c.milestones}, {"lr_gamma", c.lr_gamma},  {"lr_min", c.lr_min},
          {"warmup_epochs", c.warmup_epochs}, {"label_smoothing", c.label_smoothing},
          {"optimizer", c.optimizer}, {"beta1", c.beta1}, {"beta2", c.beta2},
          {"adam_eps", c.adam_eps}, {"clip_grad_norm", c.clip_grad_norm},
          {"ema_decay", c.ema_decay}, {"cutout", c.cutout}, {"precision", c.precision}};
}

std::string rng_state_str(const Rng::State& s) {
  nlohmann::json j = nlohmann::json::array();
  for (uint64_t v : s) j.push_back(std::to_string(v));
  return j.dump();
}

Rng::State rng_state_parse(const std::string& text, const std::string& file) {
  Rng::State s{};
  try {
    auto j = nlohmann::json::parse(text);
    for (size_t i = 0; i < 4; ++i) s[i] = std::stoull(j.at(i).get<std::string>());
  } catch (const std::exception&) {
    throw InputError(file + ": corrupt checkpoint: bad rng_state");
  }
  return s;
}

struct Data {
  std::shared_ptr<const data::Dataset> train, val;
  std::vector<std::string> classes;
};

Data load_data(const TrainConfig& c, dist::ProcessGroup& pg) {
  std::shared_ptr<data::Dataset> full;
  // With several ranks, rank 0 alone downloads (into a folder the ranks share); the rest wait.
  const bool shared_download = c.download && c.dataset == "cifar10" && pg.world_size() > 1;
  if (!shared_download || pg.rank() == 0) {
    try {
      full = data::open_dataset(c.dataset, c.data, "train");
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
    const double timeout = pg.timeout();
    pg.set_timeout(0);  // a download takes as long as it takes; a dead rank 0 ends the job anyway
    pg.barrier();
    pg.set_timeout(timeout);
    if (!full) full = data::open_dataset(c.dataset, c.data, "train");
  }
  Data d;
  d.classes = full->classes();
  if (c.val_split > 0) {
    HPCNET_REQUIRE(c.val_split < full->size(),
                   "--val-split " + std::to_string(c.val_split) + " leaves no training images (" +
                       std::to_string(full->size()) + " in the training split)");
    auto split = data::split_train_val(full->size(), c.val_split);
    d.train = std::make_shared<data::Subset>(full, split.train);
    d.val = std::make_shared<data::Subset>(full, split.val);
  } else {
    d.train = full;
  }
  return d;
}

data::Compose train_transform(const TrainConfig& c) {
  std::vector<data::Transform> t;
  if (c.augment) {
    t.push_back(data::RandomCrop{32, 4});
    t.push_back(data::RandomHorizontalFlip{0.5});
  }
  t.push_back(data::ToTensor{});
  t.push_back(data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}});
  if (c.cutout > 0) t.push_back(data::Cutout{c.cutout});
  return data::Compose(t);
}

std::map<std::string, std::string> model_metadata(const std::string& model_name,
                                                  const std::vector<std::string>& classes,
                                                  int64_t val_split) {
  return {{"format", "pt"},
          {"hpcnet.model", model_name},
          {"hpcnet.classes", nlohmann::json(classes).dump()},
          {"hpcnet.normalize", "{\"mean\":[0.5,0.5,0.5],\"std\":[0.5,0.5,0.5]}"},
          {"hpcnet.val_split", std::to_string(val_split)}};
}

struct CheckpointState {
  int64_t epochs_done = 0;
  int64_t steps = 0;
};

// The tensors as CPU copies (files are written from host memory).
nn::NamedTensors host_copies(const nn::NamedTensors& ts) {
  nn::NamedTensors out;
  for (auto& [n, t] : ts) out.emplace_back(n, t.device().is_cpu() ? t : t.to(cpu_device()));
  return out;
}

void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::Optimizer& opt, const optim::EMA* ema,
                     const CheckpointState& st, const std::vector<std::string>& classes,
                     int world_size) {
  nn::NamedTensors tensors;
  for (auto& [n, t] : model.state_dict()) tensors.emplace_back("model." + n, t.to(cpu_device()));
  for (auto& [n, t] : opt.state_dict()) tensors.emplace_back("optim." + n, t.to(cpu_device()));
  if (ema)
    for (auto& [n, t] : ema->state_dict()) tensors.emplace_back(n, t.to(cpu_device()));
  auto meta = model_metadata(c.model, classes, c.val_split);
  meta["hpcnet.format"] = kCheckpointFormat;
  meta["hpcnet.epochs_done"] = std::to_string(st.epochs_done);
  meta["hpcnet.steps"] = std::to_string(st.steps);
  meta["hpcnet.config"] = config_json(c).dump();
  meta["hpcnet.rng_state"] = rng_state_str(default_rng().state());
  meta["hpcnet.world_size"] = std::to_string(world_size);  // informational: resume on any count
  save_safetensors(path, tensors, meta);
}

// metrics.jsonl, kept by rank 0 alone (other ranks' writes are dropped).
class RankZeroMetrics {
 public:
  RankZeroMetrics(bool lead, const std::string& path, bool append) {
    if (lead) log_.emplace(path, append);
  }
  void write(const nlohmann::json& record) {
    if (log_) log_->write(record);
  }

 private:
  std::optional<MetricsLog> log_;
};

// --fail-at-step RANK:STEP[:MODE] (testing): rank RANK fails just before its step STEP (counted
// from 1 in this invocation) by SIGKILL to itself ("kill", as kill -9), exit(1) without leaving
// MPI ("exit"), or sleeping forever ("hang").
struct FailPoint {
  int rank = -1;
  int64_t step = 0;
  std::string mode = "kill";
};

FailPoint parse_fail_at(const std::string& text) {
  FailPoint f;
  if (text.empty()) return f;
  const std::string usage = "--fail-at-step " + text + ": expected RANK:STEP[:kill|exit|hang]";
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
  HPCNET_REQUIRE(
      f.rank >= 0 && f.step >= 1 && (f.mode == "kill" || f.mode == "exit" || f.mode == "hang"),
      usage);
  return f;
}

void fail_now(const FailPoint& f) {
  std::fprintf(stderr, "hpcnet: rank %d: --fail-at-step: %s before step %lld (testing)\n", f.rank,
               f.mode.c_str(), static_cast<long long>(f.step));
  std::fflush(stderr);
  if (f.mode == "kill") ::kill(::getpid(), SIGKILL);
  if (f.mode == "exit") std::_Exit(1);
  for (;;) ::pause();  // hang
}

// Every rank evaluates its slice of the val split (positions rank, rank + W, ...; no padding, so
// no image counts twice); the counts are summed over ranks.
EvalResult evaluate_sharded(dist::ProcessGroup& pg, nn::Module& model, data::DataLoader& loader) {
  EvalResult r = evaluate(model, loader);
  if (pg.world_size() == 1) return r;
  const size_t nc = r.class_total.size();
  std::vector<double> v(2 + 2 * nc);
  v[0] = static_cast<double>(r.correct);
  v[1] = static_cast<double>(r.total);
  for (size_t c = 0; c < nc; ++c) {
    v[2 + c] = static_cast<double>(r.class_correct[c]);
    v[2 + nc + c] = static_cast<double>(r.class_total[c]);
  }
  pg.allreduce_sum(v.data(), v.size());
  r.correct = static_cast<int64_t>(v[0]);
  r.total = static_cast<int64_t>(v[1]);
  for (size_t c = 0; c < nc; ++c) {
    r.class_correct[c] = static_cast<int64_t>(v[2 + c]);
    r.class_total[c] = static_cast<int64_t>(v[2 + nc + c]);
  }
  return r;
}

}  // namespace

void apply_precision(const std::string& precision) {
  HPCNET_REQUIRE(precision == "fp32" || precision == "bf16",
                 "--precision must be fp32 or bf16 (got '" + precision + "')");
  ops::set_conv_precision(precision == "bf16" ? ops::Precision::kBFloat16
                                              : ops::Precision::kFloat32);
}

Device resolve_device(const std::string& name) {
  if (name == "cpu") return cpu_device();
  const bool want_cuda = name == "cuda" || name.rfind("cuda:", 0) == 0;
  if (name == "auto") return cuda_available() ? cuda_device(0) : cpu_device();
  if (!want_cuda) throw InputError("unknown device '" + name + "' (use auto, cpu or cuda)");
  if (!cuda_built())
    throw InputError("--device " + name +
                     ": this build has no CUDA backend (reconfigure with -DHPCNET_CUDA=ON); use "
                     "--device cpu");
  if (!cuda_available())
    throw InputError("--device " + name + ": no usable GPU (" + cuda_unavailable_reason() +
                     "); use --device cpu");
  int index = 0;
  if (name.size() > 5) {
    try {
      index = std::stoi(name.substr(5));
    } catch (const std::exception&) {
      throw InputError("--device " + name + ": expected cuda:N");
    }
  }
  HPCNET_REQUIRE(index >= 0 && index < cuda_device_count(),
                 "--device " + name + ": this machine has " + std::to_string(cuda_device_count()) +
                     " GPU(s)");
  return cuda_device(index);
}

data::Compose eval_transform() {
  return data::Compose({data::ToTensor{}, data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}});
}

void save_model(const std::string& path, const nn::Module& model, const std::string& model_name,
                const std::vector<std::string>& classes, int64_t val_split) {
  save_safetensors(path, host_copies(model.state_dict()),
                   model_metadata(model_name, classes, val_split));
}

LoadedModel load_model(const std::string& path, const std::string& model_name) {
  SafetensorsFile f = load_safetensors(path);
  LoadedModel m;
  auto get = [&](const std::string& k) {
    auto it = f.metadata.find(k);
    return it == f.metadata.end() ? std::string() : it->second;
  };
  m.name = get("hpcnet.model");
  if (m.name.empty()) {
    HPCNET_REQUIRE(!model_name.empty(), path + ": no model name in the file's metadata; pass --model");
    m.name = model_name;
  } else if (!model_name.empty() && model_name != m.name) {
    throw InputError(path + ": holds weights of model '" + m.name + "', not '" + model_name + "'");
  }
  std::string classes = get("hpcnet.classes");
  if (!classes.empty()) {
    try {
      m.classes = nlohmann::json::parse(classes).get<std::vector<std::string>>();
    } catch (const std::exception&) {
      throw InputError(path + ": metadata hpcnet.classes is not a JSON list of names");
    }
  }
  if (m.classes.empty()) m.classes = data::cifar10_class_names();
  std::string vs = get("hpcnet.val_split");
  m.val_split = vs.empty() ? 0 : std::stoll(vs);
  m.module = nn::make_model(m.name, static_cast<int64_t>(m.classes.size()));
  // Accept a checkpoint too: its model tensors are prefixed "model.".
  std::map<std::string, Tensor> state;
  bool is_checkpoint = get("hpcnet.format") == kCheckpointFormat;
  for (auto& [n, t] : f.tensors) {
    if (!is_checkpoint)
      state.emplace(n, t);
    else if (n.rfind("model.", 0) == 0)
      state.emplace(n.substr(6), t);
  }
  try {
    m.module->load_state_dict(state);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what() + " (is this a " + m.name + " weights file?)");
  }
  m.module->eval();
  return m;
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

EvalResult evaluate(nn::Module& model, data::DataLoader& loader, bool flip_tta) {
  EvalResult r;
  r.classes = loader.dataset().classes();
  size_t nc = r.classes.size();
  r.class_correct.assign(nc, 0);
  r.class_total.assign(nc, 0);
  bool was_training = model.is_training();
  const Device device = model.parameters().empty() ? cpu_device() : model.parameters()[0].device();
  model.eval();
  NoGradGuard no_grad;
  loader.begin_epoch(0);
  data::Batch b;
  while (loader.next(b)) {
    Tensor logits = model(b.images.to(device));
    if (flip_tta) logits = F::add(logits, model(flip_left_right(b.images).to(device)));
    Tensor pred = F::argmax(logits).to(cpu_device());
    const int64_t* p = pred.data<int64_t>();
    const int64_t* l = b.labels.data<int64_t>();
    for (int64_t i = 0; i < b.size; ++i) {
      r.class_total[l[i]]++;
      if (p[i] == l[i]) {
        r.class_correct[l[i]]++;
        r.correct++;
      }
      r.total++;
    }
  }
  model.train(was_training);
  return r;
}

TrainResult run_training(const TrainConfig& cfg_in, std::ostream& out_all) {
  TrainConfig cfg = cfg_in;
  validate(cfg);
  const FailPoint fail_at = parse_fail_at(cfg.fail_at);
  const Device device = resolve_device(cfg.device);
  // Data parallelism: this process's place in the group (rank 0 of 1 without a launcher).
  dist::ProcessGroup& pg = dist::world();
  const int rank = pg.rank(), world = pg.world_size();
  const bool lead = rank == 0;
  std::ostream null_out(nullptr);  // other ranks print nothing
  std::ostream& out = lead ? out_all : null_out;
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

  // Resume state is read and checked before anything is written.
  CheckpointState st;
  std::optional<SafetensorsFile> ckpt;
  if (!cfg.resume.empty()) {
    std::string path = (fs::path(cfg.resume) / "checkpoint.safetensors").string();
    HPCNET_REQUIRE(fs::exists(path), "--resume " + cfg.resume + ": no checkpoint.safetensors there");
    ckpt = load_safetensors(path);
    auto& meta = ckpt->metadata;
    HPCNET_REQUIRE(meta.count("hpcnet.format") && meta["hpcnet.format"] == kCheckpointFormat,
                   path + ": not an hpcnet checkpoint");
    try {
      st.epochs_done = std::stoll(meta.at("hpcnet.epochs_done"));
      st.steps = std::stoll(meta.at("hpcnet.steps"));
    } catch (const std::exception&) {
      throw InputError(path + ": corrupt checkpoint: bad epoch or step count");
    }
    HPCNET_REQUIRE(meta["hpcnet.model"] == cfg.model,
                   path + ": checkpoint is for model '" + meta["hpcnet.model"] + "', not '" +
                       cfg.model + "'");
  }

  Data d = load_data(cfg, pg);
  manual_seed(cfg.seed);
  std::shared_ptr<nn::Module> model = nn::make_model(cfg.model, static_cast<int64_t>(d.classes.size()));
  model->to_(device);
  const optim::LrSchedule schedule = make_schedule(cfg);
  HPCNET_REQUIRE(cfg.precision == "fp32" || device.is_cpu(),
                 "--precision bf16 is implemented for the CPU (oneDNN) only; use --precision fp32 "
                 "with --device " + cfg.device);
  apply_precision(cfg.precision);
  std::unique_ptr<optim::Optimizer> opt_ptr;
  if (cfg.optimizer == "adamw")
    opt_ptr = std::make_unique<optim::AdamW>(
        model->named_parameters(),
        optim::AdamWOptions{cfg.lr, cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay});
  else
    opt_ptr = std::make_unique<optim::SGD>(
        model->named_parameters(),
        optim::SGDOptions{cfg.lr, cfg.momentum, cfg.dampening, cfg.weight_decay, cfg.nesterov});
  optim::Optimizer& opt = *opt_ptr;
  std::unique_ptr<optim::EMA> ema;
  if (cfg.ema_decay > 0) ema = std::make_unique<optim::EMA>(*model, cfg.ema_decay);
  if (ckpt) {
    std::map<std::string, Tensor> mstate, ostate, estate;
    for (auto& [n, t] : ckpt->tensors) {
      if (n.rfind("model.", 0) == 0)
        mstate.emplace(n.substr(6), t);
      else if (n.rfind("optim.", 0) == 0)
        ostate.emplace(n.substr(6), t);
      else if (n.rfind("ema.", 0) == 0)
        estate.emplace(n, t);
    }
    try {
      model->load_state_dict(mstate);
      opt.load_state_dict(ostate, st.steps);
      if (ema) ema->load_state_dict(estate);
    } catch (const InputError& e) {
      throw InputError(cfg.resume + "/checkpoint.safetensors: " + e.what());
    }
    default_rng().set_state(rng_state_parse(ckpt->metadata["hpcnet.rng_state"], ckpt->path));
    auto ws = ckpt->metadata.find("hpcnet.world_size");
    if (lead && ws != ckpt->metadata.end() && ws->second != std::to_string(world))
      std::fprintf(stderr,
                   "hpcnet: resuming a run of %s ranks on %d: the global batch is now %lld "
                   "(%d x %lld per rank)\n",
                   ws->second.c_str(), world, static_cast<long long>(world * cfg.batch_size), world,
                   static_cast<long long>(cfg.batch_size));
    ckpt.reset();
  }
  // Every replica starts from rank 0's state (ranks wait here for the slowest data loading, hence
  // the longer timeout), and gradients are averaged over ranks in buckets during backward.
  std::unique_ptr<dist::GradReducer> reducer;
  if (world > 1) {
    pg.set_timeout(cfg.dist_timeout > 0 ? std::max(cfg.dist_timeout, 600.0) : 0);
    for (auto& [n, t] : model->state_dict()) pg.broadcast(t, 0);
    for (auto& [n, t] : opt.state_dict()) pg.broadcast(t, 0);
    if (ema)
      for (auto& [n, t] : ema->state_dict()) pg.broadcast(t, 0);
    pg.set_timeout(cfg.dist_timeout);
    reducer = std::make_unique<dist::GradReducer>(
        pg, model->parameters(), dist::ReducerOptions{static_cast<size_t>(cfg.bucket_kb) * 1024});
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
  data::DataLoader loader(d.train, train_transform(cfg), lo);
  std::unique_ptr<data::DataLoader> val_loader;
  if (d.val) {
    data::DataLoaderOptions vo;
    vo.batch_size = 500;
    vo.num_workers = std::min(cfg.workers, 1);
    std::shared_ptr<const data::Dataset> val = d.val;
    if (world > 1) {  // this rank's slice: positions rank, rank + W, ...
      std::vector<int64_t> mine;
      for (int64_t i = rank; i < val->size(); i += world) mine.push_back(i);
      val = std::make_shared<data::Subset>(val, std::move(mine));
    }
    val_loader = std::make_unique<data::DataLoader>(val, eval_transform(), vo);
  }

  if (lead) {
    // An unusable --out is the user's to fix (exit 2), like bad data.
    std::error_code ec;
    fs::create_directories(cfg.out, ec);
    if (ec || !fs::is_directory(cfg.out))
      throw InputError("--out " + cfg.out + ": cannot create the run directory (" +
                       (ec ? ec.message() : std::string("not a directory")) + ")");
  }
  const std::string ckpt_path = (fs::path(cfg.out) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(cfg.out) / "model.safetensors").string();
  RankZeroMetrics metrics(lead, (fs::path(cfg.out) / "metrics.jsonl").string(), st.epochs_done > 0);
  {
    nlohmann::json rec = {{"event", "start"}, {"config", config_json(cfg)},
                          {"train_images", d.train->size()},
                          {"val_images", d.val ? d.val->size() : 0},
                          {"start_epoch", st.epochs_done + 1}, {"threads", ops::get_num_threads()}};
    if (world > 1) {
      rec["world_size"] = world;
      rec["global_batch_size"] = world * cfg.batch_size;
      rec["allreduce_floats_per_step"] = reducer->num_floats();
      rec["allreduce_buckets"] = reducer->num_buckets();
    }
    metrics.write(rec);
  }

  bool show_bar = lead && (cfg.progress == 1 || (cfg.progress == -1 && stdout_is_tty()));
  TrainResult res;
  res.world_size = world;
  model->train();
  using clock = std::chrono::steady_clock;
  auto t_start = clock::now();
  bool stop = false, partial = false;
  for (int64_t epoch = st.epochs_done; epoch < cfg.epochs && !stop; ++epoch) {
    auto t_epoch = clock::now();
    loader.begin_epoch(epoch);
    ProgressBar bar(show_bar, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                    loader.num_batches(), world * cfg.batch_size);
    double running_loss = 0, epoch_loss = 0;
    int64_t epoch_steps = 0;
    data::Batch batch;
    auto next_batch = [&] {  // times how long the step waits for data
      auto t0 = clock::now();
      bool more = loader.next(batch);
      res.data_wait_seconds += std::chrono::duration<double>(clock::now() - t0).count();
      return more;
    };
    for (int64_t i = 0; next_batch(); ++i) {
      if (fail_at.rank == rank && res.steps + 1 == fail_at.step) fail_now(fail_at);
      opt.set_lr(schedule.lr_at(st.steps, loader.num_batches(), cfg.epochs));
      opt.zero_grad();
      if (!device.is_cpu()) {
        batch.images = batch.images.to(device);
        batch.labels = batch.labels.to(device);
      }
      Tensor outputs = model->forward(batch.images);
      Tensor loss = F::cross_entropy(outputs, batch.labels, cfg.label_smoothing);
      if (reducer)
        reducer->backward(loss);  // gradients averaged over ranks
      else
        loss.backward();
      if (cfg.clip_grad_norm > 0) optim::clip_grad_norm(model->parameters(), cfg.clip_grad_norm);
      opt.step();
      if (ema) ema->update(*model);
      double l = loss.item();
      HPCNET_CHECK(std::isfinite(l), "loss became " + std::to_string(l) + " at epoch " +
                                         std::to_string(epoch + 1) + " step " + std::to_string(i + 1) +
                                         "; lower --lr");
      running_loss += l;
      epoch_loss += l;
      ++epoch_steps;
      ++st.steps;
      ++res.steps;
      res.images += batch.size * world;  // batch b has the same size on every rank
      if ((i + 1) % cfg.log_every == 0) {
        bar.clear();
        if (world > 1) pg.allreduce_sum(&running_loss, 1);  // the mean over every rank's batches
        double avg = running_loss / (cfg.log_every * world);
        char line[64];
        std::snprintf(line, sizeof line, "[%lld, %5lld] loss: %.3f", static_cast<long long>(epoch + 1),
                      static_cast<long long>(i + 1), avg);
        if (!cfg.quiet) out << line << std::endl;
        res.last_report_loss = avg;
        double el = std::chrono::duration<double>(clock::now() - t_start).count();
        metrics.write({{"event", "log"}, {"epoch", epoch + 1}, {"step", i + 1},
                       {"loss", avg}, {"lr", opt.lr()}, {"elapsed_s", el}});
        running_loss = 0;
      }
      bar.update(i + 1);
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
        {"images_per_sec", epoch_s > 0 ? epoch_steps * cfg.batch_size * world / epoch_s : 0}};
    if (partial) break;  // a partial epoch is not checkpointed
    st.epochs_done = epoch + 1;
    // Replicas must be identical; a cheap fingerprint check catches a transport or ordering bug.
    dist::check_same_on_all_ranks(pg, model->parameters(),
                                  "model parameters after epoch " + std::to_string(epoch + 1));
    if (lead) save_checkpoint(ckpt_path, cfg, *model, opt, ema.get(), st, d.classes, world);
    // With an EMA, evaluation and the model file use the averaged weights.
    if (ema) ema->swap(*model);
    if (val_loader) {
      EvalResult ev = evaluate_sharded(pg, *model, *val_loader);
      res.val_accuracy = ev.accuracy();
      rec["val_accuracy"] = ev.accuracy();
    }
    metrics.write(rec);
    if (lead) save_model(model_path, *model, cfg.model, d.classes, cfg.val_split);
    if (ema) ema->swap(*model);
  }
  if (partial && lead) {
    if (ema) ema->swap(*model);
    save_model(model_path, *model, cfg.model, d.classes, cfg.val_split);
    if (ema) ema->swap(*model);
  }
  metrics.write({{"event", "end"},
                 {"steps", res.steps},
                 {"images", res.images},
                 {"train_seconds", res.train_seconds},
                 {"images_per_sec", res.train_seconds > 0 ? res.images / res.train_seconds : 0.0},
                 {"last_report_loss", res.last_report_loss},
                 {"val_accuracy", res.val_accuracy},
                 {"data_wait_seconds", res.data_wait_seconds}});
  if (!cfg.quiet) out << "Finished Training" << std::endl;
  return res;
}

}  // namespace hpcnet::train
