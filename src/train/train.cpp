// The training loop behind `hpcnet train`: the tutorial's program (data -> model -> cross-entropy
// -> backward -> SGD, loss lines every log_every mini-batches), plus checkpoints after every
// epoch, exact resume, metrics.jsonl and a progress bar on terminals.
#include "hpcnet/train.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "src/ops/ops.h"
#include "src/train/progress.h"

namespace fs = std::filesystem;

namespace hpcnet::train {
namespace {

constexpr const char* kCheckpointFormat = "hpcnet-checkpoint-1";

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
  nn::make_model(c.model);  // throws for unknown models
}

nlohmann::json config_json(const TrainConfig& c) {
  return {{"model", c.model},         {"dataset", c.dataset},     {"data", c.data},
          {"epochs", c.epochs},       {"batch_size", c.batch_size}, {"lr", c.lr},
          {"momentum", c.momentum},   {"dampening", c.dampening}, {"weight_decay", c.weight_decay},
          {"nesterov", c.nesterov},   {"seed", c.seed},           {"log_every", c.log_every},
          {"val_split", c.val_split}, {"augment", c.augment},     {"workers", c.workers},
          {"threads", c.threads}};
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

Data load_data(const TrainConfig& c) {
  std::shared_ptr<data::Dataset> full;
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

void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::SGD& opt, const CheckpointState& st,
                     const std::vector<std::string>& classes) {
  nn::NamedTensors tensors;
  for (auto& [n, t] : model.state_dict()) tensors.emplace_back("model." + n, t);
  for (auto& [n, t] : opt.state_dict()) tensors.emplace_back("optim." + n, t);
  auto meta = model_metadata(c.model, classes, c.val_split);
  meta["hpcnet.format"] = kCheckpointFormat;
  meta["hpcnet.epochs_done"] = std::to_string(st.epochs_done);
  meta["hpcnet.steps"] = std::to_string(st.steps);
  meta["hpcnet.config"] = config_json(c).dump();
  meta["hpcnet.rng_state"] = rng_state_str(default_rng().state());
  save_safetensors(path, tensors, meta);
}

}  // namespace

Device resolve_device(const std::string& name) {
  if (name == "cpu" || name == "auto") return cpu_device();  // this build has only the CPU backend
  if (name == "cuda" || name.rfind("cuda:", 0) == 0)
    throw InputError("--device " + name +
                     ": this build has no CUDA backend; use --device cpu (or auto)");
  throw InputError("unknown device '" + name + "' (use auto, cpu or cuda)");
}

data::Compose eval_transform() {
  return data::Compose({data::ToTensor{}, data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}});
}

void save_model(const std::string& path, const nn::Module& model, const std::string& model_name,
                const std::vector<std::string>& classes, int64_t val_split) {
  save_safetensors(path, model.state_dict(), model_metadata(model_name, classes, val_split));
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

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  EvalResult r;
  r.classes = loader.dataset().classes();
  size_t nc = r.classes.size();
  r.class_correct.assign(nc, 0);
  r.class_total.assign(nc, 0);
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  loader.begin_epoch(0);
  data::Batch b;
  while (loader.next(b)) {
    Tensor pred = F::argmax(model(b.images));
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

TrainResult run_training(const TrainConfig& cfg_in, std::ostream& out) {
  TrainConfig cfg = cfg_in;
  validate(cfg);
  Device device = resolve_device(cfg.device);
  (void)device;
  ops::set_num_threads(cfg.threads);

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

  Data d = load_data(cfg);
  manual_seed(cfg.seed);
  std::shared_ptr<nn::Module> model = nn::make_model(cfg.model, static_cast<int64_t>(d.classes.size()));
  optim::SGD opt(model->named_parameters(),
                 {cfg.lr, cfg.momentum, cfg.dampening, cfg.weight_decay, cfg.nesterov});
  if (ckpt) {
    std::map<std::string, Tensor> mstate, ostate;
    for (auto& [n, t] : ckpt->tensors) {
      if (n.rfind("model.", 0) == 0)
        mstate.emplace(n.substr(6), t);
      else if (n.rfind("optim.", 0) == 0)
        ostate.emplace(n.substr(6), t);
    }
    try {
      model->load_state_dict(mstate);
      opt.load_state_dict(ostate, st.steps);
    } catch (const InputError& e) {
      throw InputError(cfg.resume + "/checkpoint.safetensors: " + e.what());
    }
    default_rng().set_state(rng_state_parse(ckpt->metadata["hpcnet.rng_state"], ckpt->path));
    ckpt.reset();
  }

  data::DataLoaderOptions lo;
  lo.batch_size = cfg.batch_size;
  lo.shuffle = true;
  lo.drop_last = false;
  lo.num_workers = cfg.workers;
  // Small batches are cheap to hold: a deeper ring lets workers run ahead in bursts.
  lo.prefetch_factor = cfg.workers > 0 ? std::max<int64_t>(2, 16 / cfg.workers) : 2;
  lo.seed = cfg.seed;
  data::DataLoader loader(d.train, train_transform(cfg), lo);
  std::unique_ptr<data::DataLoader> val_loader;
  if (d.val) {
    data::DataLoaderOptions vo;
    vo.batch_size = 500;
    vo.num_workers = std::min(cfg.workers, 1);
    val_loader = std::make_unique<data::DataLoader>(d.val, eval_transform(), vo);
  }

  {
    // An unusable --out is the user's to fix (exit 2), like bad data.
    std::error_code ec;
    fs::create_directories(cfg.out, ec);
    if (ec || !fs::is_directory(cfg.out))
      throw InputError("--out " + cfg.out + ": cannot create the run directory (" +
                       (ec ? ec.message() : std::string("not a directory")) + ")");
  }
  const std::string ckpt_path = (fs::path(cfg.out) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(cfg.out) / "model.safetensors").string();
  MetricsLog metrics((fs::path(cfg.out) / "metrics.jsonl").string(), st.epochs_done > 0);
  {
    nlohmann::json rec = {{"event", "start"}, {"config", config_json(cfg)},
                          {"train_images", d.train->size()},
                          {"val_images", d.val ? d.val->size() : 0},
                          {"start_epoch", st.epochs_done + 1}, {"threads", ops::get_num_threads()}};
    metrics.write(rec);
  }

  bool show_bar = cfg.progress == 1 || (cfg.progress == -1 && stdout_is_tty());
  TrainResult res;
  model->train();
  using clock = std::chrono::steady_clock;
  auto t_start = clock::now();
  bool stop = false, partial = false;
  for (int64_t epoch = st.epochs_done; epoch < cfg.epochs && !stop; ++epoch) {
    auto t_epoch = clock::now();
    loader.begin_epoch(epoch);
    ProgressBar bar(show_bar, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                    loader.num_batches(), cfg.batch_size);
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
      opt.zero_grad();
      Tensor outputs = model->forward(batch.images);
      Tensor loss = F::cross_entropy(outputs, batch.labels);
      loss.backward();
      opt.step();
      double l = loss.item();
      HPCNET_CHECK(std::isfinite(l), "loss became " + std::to_string(l) + " at epoch " +
                                         std::to_string(epoch + 1) + " step " + std::to_string(i + 1) +
                                         "; lower --lr");
      running_loss += l;
      epoch_loss += l;
      ++epoch_steps;
      ++st.steps;
      ++res.steps;
      res.images += batch.size;
      if ((i + 1) % cfg.log_every == 0) {
        bar.clear();
        double avg = running_loss / cfg.log_every;
        char line[64];
        std::snprintf(line, sizeof line, "[%lld, %5lld] loss: %.3f", static_cast<long long>(epoch + 1),
                      static_cast<long long>(i + 1), avg);
        if (!cfg.quiet) out << line << std::endl;
        res.last_report_loss = avg;
        double el = std::chrono::duration<double>(clock::now() - t_start).count();
        metrics.write({{"event", "log"}, {"epoch", epoch + 1}, {"step", i + 1},
                       {"loss", avg}, {"elapsed_s", el}});
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
    nlohmann::json rec = {{"event", "epoch"},
                          {"epoch", epoch + 1},
                          {"steps", epoch_steps},
                          {"train_loss", epoch_steps ? epoch_loss / epoch_steps : 0.0},
                          {"seconds", epoch_s},
                          {"images_per_sec", epoch_s > 0 ? epoch_steps * cfg.batch_size / epoch_s : 0}};
    if (partial) break;  // a partial epoch is not checkpointed
    st.epochs_done = epoch + 1;
    if (val_loader) {
      EvalResult ev = evaluate(*model, *val_loader);
      res.val_accuracy = ev.accuracy();
      rec["val_accuracy"] = ev.accuracy();
    }
    metrics.write(rec);
    save_checkpoint(ckpt_path, cfg, *model, opt, st, d.classes);
    save_model(model_path, *model, cfg.model, d.classes, cfg.val_split);
  }
  if (partial) save_model(model_path, *model, cfg.model, d.classes, cfg.val_split);
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
