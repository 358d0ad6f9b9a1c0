// The run-file format (see checkpoint.h): one writer, one reader, and save_model / load_model on
// top of them.
#include "src/train/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "hpcnet/io.h"
#include "src/nn/models/yolo.h"

namespace hpcnet::train {
namespace {

constexpr const char* kNormalize = "{\"mean\":[0.5,0.5,0.5],\"std\":[0.5,0.5,0.5]}";
constexpr const char* kImageNetNormalize =
    "{\"mean\":[0.485,0.456,0.406],\"std\":[0.229,0.224,0.225]}";

// {"mean":[...],"std":[...]} with each float at its shortest decimal form (0.485, not
// 0.48500001430511475).
std::string normalize_json(const data::Normalize& n) {
  auto row = [](const std::array<float, 3>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (float f : v) a.push_back(std::stod(fmt::format("{}", f)));
    return a;
  };
  return nlohmann::json{{"mean", row(n.mean)}, {"std", row(n.std)}}.dump();
}

std::map<std::string, std::string> meta_strings(const ModelMeta& m) {
  const std::string normalize = m.normalize ? normalize_json(*m.normalize)
                                : m.eval_policy == "imagenet" ? kImageNetNormalize
                                                              : kNormalize;
  std::map<std::string, std::string> s = {{"format", "pt"},
                                          {"hpcnet.model", m.model},
                                          {"hpcnet.classes", nlohmann::json(m.classes).dump()},
                                          {"hpcnet.normalize", normalize},
                                          {"hpcnet.val_split", std::to_string(m.val_split)}};
  if (!m.task.empty()) s["hpcnet.task"] = m.task;
  if (m.imgsz > 0) s["hpcnet.imgsz"] = std::to_string(m.imgsz);  // 0: not recorded
  if (!m.eval_policy.empty()) s["hpcnet.augment"] = m.eval_policy;
  if (!m.int8_ranges.empty()) s["hpcnet.int8"] = nlohmann::json(m.int8_ranges).dump();
  return s;
}

void append_host(nn::NamedTensors& out, const std::string& prefix, const nn::NamedTensors& ts) {
  for (auto& [n, t] : ts)
    out.emplace_back(prefix + n, t.device().is_cpu() ? t : t.to(cpu_device()));
}

// The first tensor of ts (name-tensor pairs; floating point) holding NaN or Inf, as "NAME (k of n
// values are NaN or Inf)", or "" when every value is finite.
template <class NamedRange>
std::string first_non_finite(const NamedRange& ts) {
  for (const auto& [name, t] : ts) {
    if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64) continue;
    const Tensor c = t.contiguous();
    int64_t bad = 0;
    if (c.dtype() == DType::kFloat32) {
      const float* p = c.data<float>();
      for (int64_t i = 0; i < c.numel(); ++i) bad += !std::isfinite(p[i]);
    } else {
      const double* p = c.data<double>();
      for (int64_t i = 0; i < c.numel(); ++i) bad += !std::isfinite(p[i]);
    }
    if (bad)
      return name + " (" + std::to_string(bad) + " of " + std::to_string(c.numel()) +
             " values are NaN or Inf)";
  }
  return "";
}

std::string num17(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void write_run_file(const std::string& path, const ModelMeta& meta, const nn::NamedTensors& model,
                    const nn::NamedTensors* optim, const nn::NamedTensors* ema,
                    const TrainState* state, const nn::NamedTensors* grads = nullptr) {
  nn::NamedTensors tensors;
  append_host(tensors, state ? "model." : "", model);
  if (optim) append_host(tensors, "optim.", *optim);
  if (ema) append_host(tensors, "", *ema);
  if (grads) append_host(tensors, "grad.", *grads);
  if (std::string bad = first_non_finite(tensors); !bad.empty())
    throw std::runtime_error("refusing to write " + path + ": tensor " + bad +
                             "; the training diverged (lower --lr, or --clip-grad-norm), and "
                             "the previous file is kept");
  auto m = meta_strings(meta);
  if (state) {
    nlohmann::json rng = nlohmann::json::array();
    for (uint64_t v : state->rng) rng.push_back(std::to_string(v));
    m["hpcnet.format"] = kCheckpointFormat;
    m["hpcnet.epochs_done"] = std::to_string(state->epochs_done);
    m["hpcnet.steps"] = std::to_string(state->steps);
    m["hpcnet.config"] = state->recipe.dump();
    if (!state->data.is_null()) m["hpcnet.data"] = state->data.dump();
    m["hpcnet.rng_state"] = rng.dump();
    m["hpcnet.world_size"] = std::to_string(state->world_size);
    m["hpcnet.optimizer_steps"] = std::to_string(state->optimizer_steps);
    m["hpcnet.last_opt_step"] = std::to_string(state->last_opt_step);
    if (state->epoch_step > 0) {
      m["hpcnet.epoch_step"] = std::to_string(state->epoch_step);
      m["hpcnet.loss_sums"] =
          "[" + num17(state->epoch_loss) + "," + num17(state->running_loss) + "]";
    }
    if (state->best) m["hpcnet.best_metric"] = num17(*state->best);
  }
  save_safetensors(path, tensors, m);
}

// A metadata value for a message, cut at 60 characters.
std::string brief(const std::string& text) {
  return text.size() <= 60 ? text : text.substr(0, 60) + "...";
}

int64_t parse_int(const std::string& text, const std::string& path, const std::string& what) {
  try {
    size_t end = 0;
    const long long v = std::stoll(text, &end);
    if (end == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw InputError(path + ": corrupt metadata: " + what + " is not an integer ('" + brief(text) +
                   "')");
}

// At most this many class names (a model of more would be built with an output of that size).
constexpr size_t kMaxClasses = 100'000;

// A metadata value holding JSON (hpcnet.classes, .config, .rng_state, .loss_sums), parsed once a
// linear scan (brackets and commas outside strings) has found its nesting at most 16 deep and, for
// a top-level list or object, at most max_items entries; InputError naming the file and the key
// otherwise. (No parser callback: nlohmann's is quadratic in a container's size.)
nlohmann::json parse_meta_json(const std::string& text, const std::string& path,
                               const std::string& key, size_t max_items = SIZE_MAX) {
  int depth = 0;
  size_t items = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      HPCNET_REQUIRE(++depth <= 16,
                     path + ": corrupt metadata: " + key + " nests over 16 levels deep");
    } else if (ch == ']' || ch == '}') {
      --depth;
    } else if (ch == ',' && depth == 1) {
      HPCNET_REQUIRE(++items < max_items, path + ": metadata " + key + " holds over " +
                                              std::to_string(max_items) +
                                              " entries; not an hpcnet file");
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw InputError(path + ": corrupt metadata: " + key + " is not valid JSON ('" + brief(text) +
                     "')");
  }
}

constexpr const char* kCifarResNet18 = "cifar_resnet18";

// The CIFAR ResNet-18 was called "resnet18" until torchvision's ResNets took the name: a file of
// that name holding the CIFAR variant's classifier ("linear.weight"; torchvision's is "fc")
// reads as cifar_resnet18, said once per process on stderr.
void rename_legacy_model(RunFile& r) {
  if (r.meta.model != "resnet18" || !r.model.count("linear.weight") || r.model.count("fc.weight"))
    return;
  r.meta.model = kCifarResNet18;
  static std::once_flag said;
  std::call_once(said, [&] {
    std::fprintf(stderr,
                 "hpcnet: %s: model 'resnet18' (the CIFAR variant) is now called "
                 "'cifar_resnet18'; 'resnet18' is torchvision's ImageNet ResNet-18\n",
                 r.path.c_str());
  });
}

}  // namespace

void write_model_file(const std::string& path, const ModelMeta& meta,
                      const nn::NamedTensors& model) {
  write_run_file(path, meta, model, nullptr, nullptr, nullptr);
}

void write_checkpoint(const std::string& path, const ModelMeta& meta, const nn::NamedTensors& model,
                      const nn::NamedTensors& optim, const nn::NamedTensors& ema,
                      const TrainState& state, const nn::NamedTensors& grads) {
  write_run_file(path, meta, model, &optim, &ema, &state, &grads);
}

RunFile read_run_file(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  if (std::string bad = first_non_finite(f.tensors); !bad.empty())
    throw InputError(path + ": tensor " + bad +
                     ": these weights come from a diverged run and cannot be used");
  RunFile r;
  r.path = path;
  auto get = [&](const std::string& k) {
    auto it = f.metadata.find(k);
    return it == f.metadata.end() ? std::string() : it->second;
  };
  r.meta.model = get("hpcnet.model");
  r.meta.task = get("hpcnet.task");  // "" in files of no task (PyTorch-saved, or before tasks)
  if (std::string c = get("hpcnet.classes"); !c.empty()) {
    try {
      r.meta.classes =
          parse_meta_json(c, path, "hpcnet.classes", kMaxClasses).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      throw InputError(path + ": metadata hpcnet.classes is not a JSON list of names");
    }
  }
  if (std::string s = get("hpcnet.imgsz"); !s.empty()) {
    r.meta.imgsz = parse_int(s, path, "hpcnet.imgsz");
    HPCNET_REQUIRE(r.meta.imgsz >= 1, path + ": corrupt metadata: hpcnet.imgsz " + s);
  }
  r.meta.eval_policy = get("hpcnet.augment");
  HPCNET_REQUIRE(r.meta.eval_policy.empty() || r.meta.eval_policy == "imagenet",
                 path + ": unknown hpcnet.augment '" + r.meta.eval_policy +
                     "' (a newer hpcnet wrote it?)");
  if (std::string s = get("hpcnet.val_split"); !s.empty())
    r.meta.val_split = parse_int(s, path, "hpcnet.val_split");
  if (std::string s = get("hpcnet.int8"); !s.empty()) {
    try {
      r.meta.int8_ranges = parse_meta_json(s, path, "hpcnet.int8", kMaxClasses)
                               .get<std::map<std::string, double>>();
    } catch (const nlohmann::json::exception&) {
      throw InputError(path + ": metadata hpcnet.int8 is not a JSON object of numbers");
    }
  }
  const bool is_checkpoint = get("hpcnet.format") == kCheckpointFormat;
  for (auto& [n, t] : f.tensors) {
    if (!is_checkpoint)
      r.model.emplace(n, t);
    else if (n.rfind("model.", 0) == 0)
      r.model.emplace(n.substr(6), t);
    else if (n.rfind("optim.", 0) == 0)
      r.optim.emplace(n.substr(6), t);
    else if (n.rfind("grad.", 0) == 0)
      r.grad.emplace(n.substr(5), t);
    else if (n.rfind("ema.", 0) == 0)
      r.ema.emplace(n, t);
  }
  rename_legacy_model(r);
  if (!is_checkpoint) return r;
  TrainState st;
  for (const char* key : {"hpcnet.epochs_done", "hpcnet.steps"}) {
    const std::string v = get(key);
    HPCNET_REQUIRE(!v.empty(), path + ": corrupt checkpoint: no " + key);
    (key == std::string("hpcnet.steps") ? st.steps : st.epochs_done) = parse_int(v, path, key);
  }
  HPCNET_REQUIRE(st.epochs_done >= 0 && st.steps >= 0,
                 path + ": corrupt checkpoint: a negative epoch or step count");
  // Written since gradient accumulation exists; an older checkpoint stepped at every batch.
  st.optimizer_steps = st.steps;
  st.last_opt_step = st.steps - 1;
  if (std::string v = get("hpcnet.optimizer_steps"); !v.empty())
    st.optimizer_steps = parse_int(v, path, "hpcnet.optimizer_steps");
  if (std::string v = get("hpcnet.last_opt_step"); !v.empty())
    st.last_opt_step = parse_int(v, path, "hpcnet.last_opt_step");
  HPCNET_REQUIRE(st.optimizer_steps >= 0 && st.optimizer_steps <= st.steps &&
                     st.last_opt_step >= -1 && st.last_opt_step < st.steps,
                 path + ": corrupt checkpoint: hpcnet.optimizer_steps " +
                     std::to_string(st.optimizer_steps) + " and hpcnet.last_opt_step " +
                     std::to_string(st.last_opt_step) + " do not fit hpcnet.steps " +
                     std::to_string(st.steps));
  HPCNET_REQUIRE(r.grad.empty() || st.last_opt_step < st.steps - 1,
                 path + ": corrupt checkpoint: accumulated gradients at an optimizer step");
  {
    const nlohmann::json j = parse_meta_json(get("hpcnet.rng_state"), path, "hpcnet.rng_state", 4);
    try {
      for (size_t i = 0; i < 4; ++i) st.rng[i] = std::stoull(j.at(i).get<std::string>());
    } catch (const std::exception&) {
      throw InputError(path + ": corrupt checkpoint: bad hpcnet.rng_state");
    }
  }
  const std::string config = get("hpcnet.config");
  HPCNET_REQUIRE(!config.empty(), path + ": not an hpcnet checkpoint (no config)");
  st.recipe = parse_meta_json(config, path, "hpcnet.config");
  HPCNET_REQUIRE(st.recipe.is_object(), path + ": corrupt checkpoint: config is not a JSON object");
  if (r.meta.model == kCifarResNet18 && st.recipe.value("model", "") == "resnet18")
    st.recipe["model"] = kCifarResNet18;  // renamed above: the recipe follows
  if (std::string d = get("hpcnet.data"); !d.empty()) {
    st.data = parse_meta_json(d, path, "hpcnet.data");
    HPCNET_REQUIRE(st.data.is_object() && st.data.value("index", nlohmann::json()).is_string(),
                   path + ": corrupt checkpoint: hpcnet.data is not a data record");
  }
  if (std::string ws = get("hpcnet.world_size"); !ws.empty())
    st.world_size = static_cast<int>(parse_int(ws, path, "hpcnet.world_size"));
  if (std::string es = get("hpcnet.epoch_step"); !es.empty()) {
    st.epoch_step = parse_int(es, path, "hpcnet.epoch_step");
    HPCNET_REQUIRE(st.epoch_step >= 0 && st.epoch_step <= st.steps,
                   path + ": corrupt checkpoint: hpcnet.epoch_step " + es);
    try {
      auto j = parse_meta_json(get("hpcnet.loss_sums"), path, "hpcnet.loss_sums", 2);
      st.epoch_loss = j.at(0).get<double>();
      st.running_loss = j.at(1).get<double>();
    } catch (const std::exception&) {
      throw InputError(path + ": corrupt checkpoint: bad hpcnet.loss_sums");
    }
  }
  if (std::string b = get("hpcnet.best_metric"); !b.empty()) {
    char* end = nullptr;
    const double v = std::strtod(b.c_str(), &end);
    HPCNET_REQUIRE(end && *end == '\0' && std::isfinite(v),
                   path + ": corrupt checkpoint: hpcnet.best_metric '" + b + "'");
    st.best = v;
  }
  r.train = std::move(st);
  return r;
}

std::string describe_run(const ModelMeta& meta, bool class_names) {
  std::string s = "a " + (meta.model.empty() ? std::string("model-less") : meta.model) + " run (" +
                  (meta.task.empty() ? std::string("no task") : meta.task) + ", ";
  if (!class_names) return s + std::to_string(meta.classes.size()) + " classes)";
  s += "classes";
  for (size_t i = 0; i < meta.classes.size() && i < 5; ++i)
    s += (i ? ", " : " ") + brief(meta.classes[i]);
  return s + (meta.classes.size() > 5 ? ", ...)" : ")");
}

namespace {

// The model, task and classes of a run file from its safetensors header alone; nullopt when the
// file is absent or unreadable or names no hpcnet model.
std::optional<ModelMeta> peek_run_meta(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return std::nullopt;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > (uint64_t{100} << 20)) return std::nullopt;
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return std::nullopt;
  try {
    const nlohmann::json h = parse_meta_json(header, path, "header");
    const nlohmann::json& m = h.at("__metadata__");
    ModelMeta meta;
    meta.model = m.value("hpcnet.model", std::string());
    if (meta.model.empty()) return std::nullopt;
    meta.task = m.value("hpcnet.task", std::string());
    if (m.contains("hpcnet.classes"))
      meta.classes = parse_meta_json(m.at("hpcnet.classes").get<std::string>(), path,
                                     "hpcnet.classes", kMaxClasses)
                         .get<std::vector<std::string>>();
    return meta;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

void check_resume_folder(const RunFile& checkpoint, const std::string& out_dir) {
  const ModelMeta& mine = checkpoint.meta;
  for (const char* name : {"model.safetensors", "best.safetensors"}) {
    const std::string other = (std::filesystem::path(out_dir) / name).string();
    const std::optional<ModelMeta> theirs = peek_run_meta(other);
    if (!theirs) continue;
    const bool same_classes =
        mine.classes.empty() || theirs->classes.empty() || mine.classes == theirs->classes;
    // A file of the run written before the CIFAR ResNet-18 was renamed (read_run_file renames
    // the checkpoint; this reads the header's metadata only).
    const bool same_model =
        theirs->model == mine.model || (mine.model == kCifarResNet18 && theirs->model == "resnet18");
    if (same_model && same_classes &&
        (theirs->task.empty() || mine.task.empty() || theirs->task == mine.task))
      continue;
    // Class lists of one length that differ are told apart by their names.
    const bool names = theirs->classes.size() == mine.classes.size() && !same_classes;
    throw InputError(checkpoint.path + " holds " + describe_run(mine, names) + "; " + other +
                     " is of " + describe_run(*theirs, names) +
                     ": a checkpoint copied from another run? Resume each run in its own folder "
                     "(or into a new one: --resume RUN --out NEW)");
  }
}

void save_model(const std::string& path, const nn::Module& model, const ModelMeta& meta) {
  write_model_file(path, meta, model.state_dict());
}

void save_model(const std::string& path, const nn::Module& model, const std::string& model_name,
                const std::vector<std::string>& classes, int64_t val_split) {
  ModelMeta m;
  m.model = model_name;
  m.classes = classes;
  m.val_split = val_split;
  m.imgsz = nn::model_info(model_name).imgsz;
  m.task = nn::model_info(model_name).task;
  save_model(path, model, m);
}

LoadedModel load_model(const std::string& path, const std::string& model_name) {
  RunFile f = read_run_file(path);
  LoadedModel m;
  m.name = f.meta.model;
  if (m.name.empty()) {
    HPCNET_REQUIRE(!model_name.empty(),
                   path + ": no model name in the file's metadata; pass --model");
    m.name = model_name;
  } else if (!model_name.empty() && model_name != m.name) {
    throw InputError(path + ": holds weights of model '" + m.name + "', not '" + model_name + "'");
  }
  const nn::ModelInfo& info = nn::model_info(m.name);
  m.classes = f.meta.classes.empty() ? data::cifar10_class_names() : f.meta.classes;
  m.classes_recorded = !f.meta.classes.empty();
  m.val_split = f.meta.val_split;
  m.task = f.meta.task.empty() ? info.task : f.meta.task;
  m.imgsz = f.meta.imgsz > 0 ? f.meta.imgsz : info.imgsz;
  m.eval_policy = f.meta.eval_policy;
  // A file without hpcnet's metadata of an ImageNet model (torchvision's ResNets saved with
  // safetensors): as torchvision evaluates it (Resize + CenterCrop, ImageNet's mean and std),
  // class names 0..K-1, K from its classifier.
  if (f.meta.model.empty() && !info.unnamed_eval_policy.empty()) {
    m.eval_policy = info.unnamed_eval_policy;
    auto head = f.model.find(info.classifier + ".weight");
    if (!m.classes_recorded && head != f.model.end() && head->second.dim() >= 1) {
      m.classes.clear();
      for (int64_t k = 0; k < head->second.size(0); ++k) m.classes.push_back(std::to_string(k));
    }
  }
  nn::ModelOptions mo{static_cast<int64_t>(m.classes.size())};
  // A model saved with an auxiliary head (deeplabv3 trained with --aux-loss) is rebuilt with it.
  for (const auto& [key, t] : f.model)
    if (key.rfind("aux_classifier.", 0) == 0) mo.aux_loss = true;
  m.module = nn::make_model(m.name, mo);
  try {
    m.module->load_state_dict(f.model);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what() + " (is this a " + m.name + " weights file?)");
  }
  if (!f.meta.int8_ranges.empty()) {
    try {
      nn::set_int8_ranges(*m.module, f.meta.int8_ranges);
    } catch (const InputError& e) {
      throw InputError(path + ": " + e.what());
    }
    m.int8_calibrated = true;
  }
  m.module->eval();
  return m;
}

}  // namespace hpcnet::train
