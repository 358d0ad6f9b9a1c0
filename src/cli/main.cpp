// The `hpcnet` command: train, eval, predict, info. Errors become one line on stderr and an exit
// code: 2 for bad usage or input (InputError, argument errors), 1 for a failure while running.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "hpcnet/data.h"
#include "hpcnet/dist.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/train.h"
#include "src/core/cuda_device.h"
#include "src/ops/ops.h"

namespace fs = std::filesystem;
using namespace hpcnet;

namespace {

// Run recipes as JSON files: `hpcnet train --config configs/NAME.json [flags]`. The file holds one
// object whose keys are train's long option names ("batch_size" or "batch-size"; keys starting
// with '#' are comments). Its values are placed before the command-line flags, and every option
// takes its last value, so flags given on the command line win. A key that names no option of
// `train` is an InputError.
std::vector<std::string> expand_config(std::vector<std::string> args, const CLI::App& train) {
  auto sub = std::find(args.begin(), args.end(), "train");
  if (sub == args.end()) return args;
  for (auto it = sub + 1; it != args.end(); ++it) {
    std::string file;
    if (*it == "--config") {
      if (it + 1 == args.end()) throw InputError("--config needs a file name");
      file = *(it + 1);
      it = args.erase(it, it + 2);
    } else if (it->rfind("--config=", 0) == 0) {
      file = it->substr(9);
      it = args.erase(it);
    } else {
      continue;
    }
    std::ifstream in(file);
    if (!in) throw InputError("--config " + file + ": cannot open the file");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw InputError(file + ": not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!j.is_object()) throw InputError(file + ": a config file holds one JSON object");
    std::vector<std::string> opts;
    for (auto& [key, value] : j.items()) {
      if (!key.empty() && key[0] == '#') continue;
      std::string name = key;
      std::replace(name.begin(), name.end(), '_', '-');
      if (name == "config" || !train.get_option_no_throw("--" + name))
        throw InputError(file + ": unknown key '" + key + "' (see hpcnet train --help)");
      if (value.is_object() || value.is_array() || value.is_null())
        throw InputError(file + ": key '" + key + "' must be a string, number or boolean");
      opts.push_back("--" + name + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    }
    args.insert(sub + 1, opts.begin(), opts.end());
    break;
  }
  return args;
}

// Recipe fields a resumed run takes from its checkpoint.
void apply_checkpoint_recipe(train::TrainConfig& c, CLI::App& t) {
  std::string path = (fs::path(c.resume) / "checkpoint.safetensors").string();
  if (!fs::exists(path))
    throw InputError("--resume " + c.resume + ": no checkpoint.safetensors there");
  SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("hpcnet.config");
  if (it == f.metadata.end()) throw InputError(path + ": not an hpcnet checkpoint (no config)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception&) {
    throw InputError(path + ": corrupt checkpoint: config is not JSON");
  }
  // Keys added after the first checkpoint format (optimizer and later) may be absent: those runs
  // used the defaults, which the field holds unless a flag set it.
  auto take = [&](const char* opt, const char* key, auto& field, bool since_v2 = false) {
    using T = std::decay_t<decltype(field)>;
    if (since_v2 && !j.contains(key)) return;
    if (!j.contains(key)) throw InputError(path + ": corrupt checkpoint: config lacks " + key);
    T saved{};
    try {
      saved = j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      throw InputError(path + ": corrupt checkpoint: config " + key + " has the wrong type");
    }
    if (t.count(opt) && saved != field)
      throw InputError(std::string(opt) + " differs from the recipe in " + path + "; --resume " +
                       "continues the same run (start a new --out to change it)");
    field = saved;
  };
  take("--model", "model", c.model);
  auto names = nn::model_names();
  if (std::find(names.begin(), names.end(), c.model) == names.end())
    throw InputError(path + ": checkpoint of model '" + c.model +
                     "', which this build does not have; resume it with a build that does");
  take("--dataset", "dataset", c.dataset);
  take("--batch-size", "batch_size", c.batch_size);
  take("--lr", "lr", c.lr);
  take("--momentum", "momentum", c.momentum);
  take("--dampening", "dampening", c.dampening);
  take("--weight-decay", "weight_decay", c.weight_decay);
  take("--nesterov", "nesterov", c.nesterov);
  take("--seed", "seed", c.seed);
  take("--log-every", "log_every", c.log_every);
  take("--val-split", "val_split", c.val_split);
  take("--augment", "augment", c.augment);
  take("--lr-schedule", "lr_schedule", c.lr_schedule);
  take("--milestones", "milestones", c.milestones);
  take("--lr-gamma", "lr_gamma", c.lr_gamma);
  take("--lr-min", "lr_min", c.lr_min);
  take("--warmup-epochs", "warmup_epochs", c.warmup_epochs);
  take("--label-smoothing", "label_smoothing", c.label_smoothing);
  take("--optimizer", "optimizer", c.optimizer, true);
  take("--beta1", "beta1", c.beta1, true);
  take("--beta2", "beta2", c.beta2, true);
  take("--adam-eps", "adam_eps", c.adam_eps, true);
  take("--clip-grad-norm", "clip_grad_norm", c.clip_grad_norm, true);
  take("--ema-decay", "ema_decay", c.ema_decay, true);
  take("--cutout", "cutout", c.cutout, true);
  take("--precision", "precision", c.precision, true);
  try {
    if (!t.count("--data")) c.data = j.value("data", c.data);
    if (!t.count("--epochs")) c.epochs = j.value("epochs", c.epochs);
    // Bit-exact resume needs the same thread count; keep the run's unless told otherwise.
    if (!t.count("--threads")) c.threads = j.value("threads", c.threads);
  } catch (const nlohmann::json::exception&) {
    throw InputError(path +
                     ": corrupt checkpoint: config data, epochs or threads has the wrong type");
  }
  if (c.out.empty()) c.out = c.resume;
}

// Prints the one-line error and returns the exit code. In a job of several ranks it names the rank
// and ends every rank with that code: the others would otherwise wait in their next collective.
int exit_with_error(int code, const std::string& line) {
  std::fflush(stdout);
  if (dist::world_initialized() && dist::world().world_size() > 1) {
    dist::ProcessGroup& w = dist::world();
    w.abort(code, line + " [rank " + std::to_string(w.rank()) + " of " +
                      std::to_string(w.world_size()) + "; ending the job]");
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  dist::finalize();
  return code;
}

int cmd_info() {
  auto v = dnnl::version();
  std::printf("hpcnet %s\n", "0.1.0");
  std::printf("backends:\n");
  std::printf("  cpu   oneDNN %d.%d.%d, %d threads (OpenMP)\n", v->major, v->minor, v->patch,
              ops::get_num_threads());
  if (!cuda_built())
    std::printf("  cuda  not built (configure with -DHPCNET_CUDA=ON)\n");
  else if (!cuda_available())
    std::printf("  cuda  built; no usable GPU here (%s)\n", cuda_unavailable_reason().c_str());
  else
    std::printf("  cuda  %s\n", cuda_describe().c_str());
  std::printf("distributed: %s\n", dist::describe_build().c_str());
  std::printf("models: ");
  auto names = nn::model_names();
  for (size_t i = 0; i < names.size(); ++i) std::printf("%s%s", i ? ", " : "", names[i].c_str());
  std::printf("\ndatasets: cifar10 (binary folder or .tar.gz, or JPEG/PNG image folder), imagefolder\n");
  return 0;
}

std::string pct1(int64_t a, int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b ? 100.0 * a / b : 0.0);
  return buf;
}

struct EvalArgs {
  std::string model, weights, dataset = "cifar10", data, split = "test";
  int64_t val_split = -1, batch_size = 500;
  int workers = 2, threads = 0;
  bool json = false, tta_flip = false;
  std::string device = "auto";
};

int cmd_eval(const EvalArgs& a) {
  const Device dev = train::resolve_device(a.device);
  HPCNET_REQUIRE(a.threads >= 0, "--threads must be >= 0 (0 = all cores)");
  HPCNET_REQUIRE(a.workers >= 0 && a.workers <= 64, "--workers must be in [0, 64]");
  ops::set_num_threads(a.threads);
  HPCNET_REQUIRE(a.split == "test" || a.split == "val",
                 "--split must be test or val (got '" + a.split + "')");
  HPCNET_REQUIRE(a.batch_size >= 1, "--batch-size must be at least 1");
  train::LoadedModel m = train::load_model(a.weights, a.model);
  m.module->to_(dev);
  std::shared_ptr<const data::Dataset> ds;
  if (a.split == "test") {
    ds = data::open_dataset(a.dataset, a.data, "test");
  } else {
    int64_t vs = a.val_split >= 0 ? a.val_split : m.val_split;
    HPCNET_REQUIRE(vs > 0, "--split val needs --val-split N (the weights file records none)");
    auto full = data::open_dataset(a.dataset, a.data, "train");
    HPCNET_REQUIRE(vs < full->size(), "--val-split is larger than the training split");
    ds = std::make_shared<data::Subset>(full, data::split_train_val(full->size(), vs).val);
  }
  HPCNET_REQUIRE(ds->classes().size() == m.classes.size(),
                 a.weights + ": model has " + std::to_string(m.classes.size()) +
                     " classes, the dataset " + std::to_string(ds->classes().size()));
  data::DataLoaderOptions o;
  o.batch_size = a.batch_size;
  o.num_workers = a.workers;
  data::DataLoader loader(ds, train::eval_transform(), o);
  train::EvalResult r = train::evaluate(*m.module, loader, a.tta_flip);
  if (a.json) {
    nlohmann::json j = {{"split", a.split}, {"images", r.total}, {"correct", r.correct},
                        {"accuracy", r.accuracy()}, {"tta", a.tta_flip ? "flip" : "none"}};
    nlohmann::json per = nlohmann::json::object();
    for (size_t c = 0; c < r.classes.size(); ++c)
      per[r.classes[c]] = r.class_total[c] ? 100.0 * r.class_correct[c] / r.class_total[c] : 0.0;
    j["per_class"] = per;
    std::cout << j.dump() << std::endl;
    return 0;
  }
  if (a.tta_flip) std::printf("(test-time augmentation: each image and its mirror image)\n");
  std::printf("Accuracy of the network on the %lld %s images: %d %%\n",
              static_cast<long long>(r.total), a.split.c_str(),
              static_cast<int>(100 * r.correct / std::max<int64_t>(r.total, 1)));
  for (size_t c = 0; c < r.classes.size(); ++c)
    std::printf("Accuracy for class: %-10s is %s %%\n", r.classes[c].c_str(),
                pct1(r.class_correct[c], r.class_total[c]).c_str());
  std::printf("accuracy: %.2f%%\n", r.accuracy());
  return 0;
}

// Bilinear resize of an HWC uint8 image (align_corners=False, as torchvision).
std::vector<uint8_t> resize_bilinear(const data::Image& im, int64_t oh, int64_t ow) {
  std::vector<uint8_t> out(oh * ow * 3);
  for (int64_t y = 0; y < oh; ++y) {
    double sy = std::max(0.0, (y + 0.5) * im.height / oh - 0.5);
    int64_t y0 = std::min<int64_t>(static_cast<int64_t>(sy), im.height - 1);
    int64_t y1 = std::min<int64_t>(y0 + 1, im.height - 1);
    double fy = sy - y0;
    for (int64_t x = 0; x < ow; ++x) {
      double sx = std::max(0.0, (x + 0.5) * im.width / ow - 0.5);
      int64_t x0 = std::min<int64_t>(static_cast<int64_t>(sx), im.width - 1);
      int64_t x1 = std::min<int64_t>(x0 + 1, im.width - 1);
      double fx = sx - x0;
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int64_t yy, int64_t xx) { return im.pixels[(yy * im.width + xx) * 3 + c]; };
        double v = (1 - fy) * ((1 - fx) * px(y0, x0) + fx * px(y0, x1)) +
                   fy * ((1 - fx) * px(y1, x0) + fx * px(y1, x1));
        out[(y * ow + x) * 3 + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return out;
}

int cmd_predict(const std::string& weights, const std::string& model_name,
                const std::vector<std::string>& images, int top, bool json, int threads,
                const std::string& device) {
  const Device dev = train::resolve_device(device);
  HPCNET_REQUIRE(threads >= 0, "--threads must be >= 0 (0 = all cores)");
  ops::set_num_threads(threads);
  HPCNET_REQUIRE(top >= 1, "--top must be at least 1");
  train::LoadedModel m = train::load_model(weights, model_name);
  m.module->to_(dev);
  data::Compose tf = train::eval_transform();
  NoGradGuard no_grad;
  int k = std::min<int>(top, static_cast<int>(m.classes.size()));
  for (const std::string& path : images) {
    data::Image im = data::read_image_file(path);
    std::vector<uint8_t> px = (im.height == 32 && im.width == 32) ? im.pixels
                                                                  : resize_bilinear(im, 32, 32);
    data::Example ex{px.data(), 32, 32, 0};
    Tensor x = Tensor::empty({1, 3, 32, 32});
    tf.apply(ex, 0, x.data<float>());
    Tensor logp = F::log_softmax(m.module->forward(x.to(dev))).to(cpu_device());
    std::vector<float> lp = logp.to_vector();
    std::vector<int> idx(lp.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return lp[a] > lp[b]; });
    if (json) {
      nlohmann::json j = {{"image", path}, {"top", nlohmann::json::array()}};
      for (int i = 0; i < k; ++i)
        j["top"].push_back({{"class", m.classes[idx[i]]}, {"probability", std::exp(lp[idx[i]])}});
      std::cout << j.dump() << std::endl;
    } else {
      std::printf("%s:", path.c_str());
      for (int i = 0; i < k; ++i)
        std::printf("%s %s %.3f", i ? "," : "", m.classes[idx[i]].c_str(), std::exp(lp[idx[i]]));
      std::printf("\n");
    }
  }
  return 0;
}

int cmd_bench(const train::BenchConfig& c, bool json) {
  train::BenchResult r = train::run_bench(c);
  std::string how;
  train::peak_fp32_gflops(ops::get_num_threads(), &how);
  if (json) {
    nlohmann::json j = {{"model", c.model},
                        {"batch_size", c.batch_size},
                        {"threads", ops::get_num_threads()},
                        {"steps", c.steps},
                        {"ms_per_step", 1000 * r.seconds_per_step},
                        {"images_per_sec", r.images_per_sec},
                        {"mflop_per_step", r.flops_per_step / 1e6},
                        {"gflops", r.gflops},
                        {"peak_gflops", r.peak_gflops},
                        {"system_allocs_per_step", r.system_allocs_per_step}};
    for (auto& [name, v] : r.kernels)
      j["kernels"][name] = {{"ms_per_step", v[0]}, {"calls_per_step", v[1]}, {"gflops", v[2]}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  std::printf("%s, batch %lld, %d threads, %s, %lld steps\n", c.model.c_str(),
              static_cast<long long>(c.batch_size), ops::get_num_threads(), c.precision.c_str(),
              static_cast<long long>(c.steps));
  std::printf("  %.3f ms/step, %.0f images/s, %.2f MFLOP/step, %.1f GFLOP/s of %.0f peak (%.1f%%)\n",
              1000 * r.seconds_per_step, r.images_per_sec, r.flops_per_step / 1e6, r.gflops,
              r.peak_gflops, 100 * r.gflops / r.peak_gflops);
  std::printf("  peak = %s\n", how.c_str());
  std::printf("  allocator misses per step in steady state: %llu\n",
              static_cast<unsigned long long>(r.system_allocs_per_step));
  if (!r.kernels.empty()) {
    std::printf("  %-28s %10s %8s %9s %7s\n", "kernel", "ms/step", "calls", "GFLOP/s", "share");
    double total = 0;
    for (auto& [n, v] : r.kernels) total += v[0];
    for (auto& [n, v] : r.kernels)
      std::printf("  %-28s %10.4f %8.1f %9.2f %6.1f%%\n", n.c_str(), v[0], v[1], v[2],
                  100 * v[0] / (1000 * r.seconds_per_step));
    std::printf("  %-28s %10.4f (kernels) of %.4f ms/step\n", "total", total,
                1000 * r.seconds_per_step);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpcnet: train and evaluate convolutional networks on CPUs (oneDNN), in C++.\n"
               "The tutorial run:  hpcnet train --data DIR --out runs/lenet"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hpcnet 0.1.0");

  train::TrainConfig tc;
  CLI::App* t = app.add_subcommand("train", "train a model (the PyTorch CIFAR-10 tutorial by default)");
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string config_file;  // read by expand_config() before parsing; listed here for --help
  t->add_option("--config", config_file,
                "a JSON run recipe (configs/*.json); flags on the command line override it");
  t->add_option("--model", tc.model, "lenet, resnet20, resnet32, resnet56 or resnet18")->capture_default_str();
  t->add_option("--dataset", tc.dataset, "cifar10 or imagefolder")->capture_default_str();
  t->add_option("--data", tc.data,
                "dataset folder or archive: cifar-10-batches-bin/, cifar-10-binary.tar.gz, or an "
                "image folder (train/<class>/*.jpg|png), unpacked or .tar/.tar.gz");
  t->add_option("--out", tc.out, "run directory for model.safetensors, checkpoint, metrics.jsonl");
  t->add_option("--resume", tc.resume, "continue the run in this directory from its last checkpoint");
  t->add_option("--epochs", tc.epochs, "epochs to train (in total, counting resumed ones)")->capture_default_str();
  t->add_option("--batch-size", tc.batch_size, "mini-batch size")->capture_default_str();
  t->add_option("--lr", tc.lr, "learning rate (the peak, with a schedule)")->capture_default_str();
  t->add_option("--momentum", tc.momentum, "SGD momentum")->capture_default_str();
  t->add_option("--dampening", tc.dampening, "SGD dampening")->capture_default_str();
  t->add_option("--weight-decay", tc.weight_decay, "weight decay (L2 for sgd, decoupled for adamw)")->capture_default_str();
  t->add_flag("--nesterov", tc.nesterov, "Nesterov momentum");
  t->add_option("--lr-schedule", tc.lr_schedule,
                "constant, multistep (--milestones, --lr-gamma), cosine (--lr-min) or onecycle "
                "(peak --lr)")->capture_default_str();
  t->add_option("--milestones", tc.milestones, "multistep: epochs where the rate is multiplied by --lr-gamma")
      ->delimiter(',');
  t->add_option("--lr-gamma", tc.lr_gamma, "multistep factor")->capture_default_str();
  t->add_option("--lr-min", tc.lr_min, "cosine: final learning rate")->capture_default_str();
  t->add_option("--warmup-epochs", tc.warmup_epochs, "linear warm-up from lr/10 over this many epochs")
      ->capture_default_str();
  t->add_option("--label-smoothing", tc.label_smoothing, "cross-entropy label smoothing")
      ->capture_default_str();
  t->add_option("--optimizer", tc.optimizer, "sgd or adamw")->capture_default_str();
  t->add_option("--beta1", tc.beta1, "adamw: first-moment decay")->capture_default_str();
  t->add_option("--beta2", tc.beta2, "adamw: second-moment decay")->capture_default_str();
  t->add_option("--adam-eps", tc.adam_eps, "adamw: denominator epsilon")->capture_default_str();
  t->add_option("--clip-grad-norm", tc.clip_grad_norm,
                "clip the gradients' total 2-norm to this before each step (0 = off)")
      ->capture_default_str();
  t->add_option("--ema-decay", tc.ema_decay,
                "keep an exponential moving average of the weights (e.g. 0.999); evaluation and "
                "model.safetensors use it (0 = off)")
      ->capture_default_str();
  t->add_option("--cutout", tc.cutout, "Cutout: zero a square of this many pixels (0 = off; 16 for CIFAR-10)")
      ->capture_default_str();
  t->add_option("--precision", tc.precision,
                "fp32, or bf16: bfloat16 convolutions with float32 accumulation and master weights")
      ->capture_default_str();
  t->add_option("--workers", tc.workers, "data-loading threads (0 = in the training thread)")->capture_default_str();
  t->add_option("--seed", tc.seed, "seed for initialisation, data order and augmentation")->capture_default_str();
  t->add_option("--log-every", tc.log_every, "mini-batches between loss lines")->capture_default_str();
  t->add_option("--val-split", tc.val_split, "hold out N training images (fixed shuffle) as split 'val'")->capture_default_str();
  t->add_flag("--augment", tc.augment, "RandomCrop(32, padding=4) and RandomHorizontalFlip");
  t->add_flag("--download", tc.download, "fetch CIFAR-10 into --data when it is missing");
  t->add_option("--download-url", tc.download_url, "where --download fetches from");
  t->add_option("--threads", tc.threads, "CPU threads for the kernels (0 = all cores)")->capture_default_str();
  t->add_option("--device", tc.device, "auto, cpu or cuda")->capture_default_str();
  t->add_option("--steps", tc.max_steps, "stop after this many steps (0 = run all epochs)");
  bool no_progress = false;
  t->add_flag("--no-progress", no_progress, "never draw the progress bar");
  t->add_option("--dist-timeout", tc.dist_timeout,
                "with several ranks (mpirun/srun): seconds a rank may wait for the others in a "
                "collective before the job is aborted, naming the missing ranks (0 = forever)")
      ->capture_default_str();
  t->add_option("--bucket-kb", tc.bucket_kb,
                "with several ranks: KiB of gradients per all-reduce bucket, started during "
                "backward (0 = one all-reduce after backward)")
      ->capture_default_str();
  t->add_option("--fail-at-step", tc.fail_at, "testing: RANK:STEP[:kill|exit|hang]")->group("");

  EvalArgs ea;
  CLI::App* e = app.add_subcommand("eval", "accuracy of trained weights on a split, per class");
  e->add_option("--weights", ea.weights, "model.safetensors (or checkpoint.safetensors)")->required();
  e->add_option("--model", ea.model, "model name (default: from the weights file)");
  e->add_option("--dataset", ea.dataset, "cifar10 or imagefolder")->capture_default_str();
  e->add_option("--data", ea.data, "dataset folder or archive")->required();
  e->add_option("--split", ea.split, "test or val")->capture_default_str();
  e->add_option("--val-split", ea.val_split, "size of the val split (default: from the weights file)");
  e->add_option("--batch-size", ea.batch_size, "evaluation batch size")->capture_default_str();
  e->add_option("--workers", ea.workers, "data-loading threads")->capture_default_str();
  e->add_option("--threads", ea.threads, "CPU threads (0 = all cores)")->capture_default_str();
  e->add_option("--device", ea.device, "auto, cpu or cuda")->capture_default_str();
  e->add_flag("--json", ea.json, "print one JSON object instead of text");
  e->add_flag("--tta-flip", ea.tta_flip,
              "test-time augmentation: classify each image and its left-right mirror, sum the "
              "logits (reported as such; training-time validation never uses it)");

  std::string pw, pm, pdevice = "auto";
  std::vector<std::string> images;
  int top = 3, pthreads = 0;
  bool pjson = false;
  CLI::App* p = app.add_subcommand("predict", "top classes of images (JPEG or PNG) by name");
  p->add_option("--weights", pw, "model.safetensors")->required();
  p->add_option("--model", pm, "model name (default: from the weights file)");
  p->add_option("--top", top, "classes to show per image")->capture_default_str();
  p->add_option("--threads", pthreads, "CPU threads (0 = all cores)");
  p->add_option("--device", pdevice, "auto, cpu or cuda")->capture_default_str();
  p->add_flag("--json", pjson, "one JSON object per image");
  p->add_option("images", images, "image files")->required();

  train::BenchConfig bc;
  bool bjson = false, bnoprof = false;
  CLI::App* b = app.add_subcommand("bench", "time training steps on synthetic data, per kernel");
  b->add_option("--model", bc.model, "model name")->capture_default_str();
  b->add_option("--batch-size", bc.batch_size, "mini-batch size")->capture_default_str();
  b->add_option("--steps", bc.steps, "timed steps")->capture_default_str();
  b->add_option("--warmup", bc.warmup, "untimed steps first")->capture_default_str();
  b->add_option("--threads", bc.threads, "CPU threads (0 = all cores)")->capture_default_str();
  b->add_option("--precision", bc.precision, "fp32 or bf16 (bfloat16 convolutions)")->capture_default_str();
  b->add_flag("--no-profile", bnoprof, "time whole steps only (no per-kernel clock reads)");
  b->add_flag("--json", bjson, "print one JSON object");

  app.add_subcommand("info", "build, backends and library versions");

  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    try {
      args = expand_config(args, *t);
    } catch (const InputError& err) {
      std::fprintf(stderr, "hpcnet: error: %s\n", err.what());
      return 2;
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app.parse(args);
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) return app.exit(err);  // --help, --version
    // One line, like every other error (CLI11's own printer adds a second "Run with --help" line).
    std::string msg = err.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    while (!msg.empty() && msg.back() == ' ') msg.pop_back();
    std::fprintf(stderr, "hpcnet: error: %s (see hpcnet --help)\n", msg.c_str());
    return 2;
  }
  try {
    if (t->parsed()) {
      dist::world();  // joins the job's process group (MPI_Init_thread under mpirun or srun)
      tc.progress = no_progress ? 0 : -1;
      if (!tc.resume.empty()) apply_checkpoint_recipe(tc, *t);
      train::run_training(tc, std::cout);
      dist::finalize();
      return 0;
    }
    if (e->parsed()) return cmd_eval(ea);
    if (p->parsed()) return cmd_predict(pw, pm, images, top, pjson, pthreads, pdevice);
    if (b->parsed()) {
      bc.profile = !bnoprof;
      return cmd_bench(bc, bjson);
    }
    return cmd_info();
  } catch (const InputError& err) {
    return exit_with_error(2, std::string("hpcnet: error: ") + err.what());
  } catch (const std::exception& err) {
    return exit_with_error(1, std::string("hpcnet: failed: ") + err.what());
  }
}
