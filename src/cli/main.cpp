// The `hpcnet` command: train, eval, predict, export, info. Errors become one line on stderr and an exit
// code: 2 for bad usage or input (InputError, argument errors), 1 for a failure while running.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <type_traits>
#include <variant>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "hpcnet/data.h"
#include "hpcnet/dist.h"
#include "hpcnet/export.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/shards.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "src/cli/build_info.h"
#include "src/cli/predict.h"
#include "src/cli/quantize.h"
#include "src/core/cuda_device.h"
#include "src/ops/omp_wait.h"
#include "src/ops/ops.h"
#include "src/train/config_file.h"
#include "src/train/plot.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using hpcnet::cli::cmd_predict;
using hpcnet::cli::PredictArgs;
using hpcnet::cli::add_quantize_command;
using hpcnet::cli::cmd_quantize;
using hpcnet::cli::QuantizeArgs;
using hpcnet::cli::task_of;

namespace {

// Run recipes as JSON files: `hpcnet train --config configs/NAME.json [flags]`. The file holds one
// object whose keys are train's long option names ("batch_size" or "batch-size"; keys starting
// with '#' are comments); train::config_json_to_flags (src/train/config_file.h) turns it into
// flags. They are placed before the command-line flags, and every option takes its last value,
// so flags given on the command line win. A key that names no option of `train` is an InputError.
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
    // A regular file of a sane size (opening a FIFO would wait for a writer).
    std::error_code fec;
    if (fs::exists(file, fec) && !fs::is_regular_file(file, fec))
      throw InputError("--config " + file + ": not a regular file");
    if (fs::exists(file, fec) && fs::file_size(file, fec) > (uint64_t{1} << 20))
      throw InputError("--config " + file + ": over 1 MiB; not a run recipe");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError("--config " + file + ": cannot open the file");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::vector<std::string> opts =
        hpcnet::train::config_json_to_flags(text, file, [&](const std::string& name) {
          return train.get_option_no_throw("--" + name) != nullptr;
        });
    args.insert(sub + 1, opts.begin(), opts.end());
    break;
  }
  return args;
}

// Registers every field of the recipe table as a flag of `train` (bools as flags, lists
// comma-separated), in the table's order. A default that is the same for every task is shown as
// CLI11 does (--lr-gamma FLOAT=0.1); one that differs by task is in the help text, each task's
// (train::recipe_help).
void add_recipe_flags(CLI::App& t, train::TrainConfig& tc) {
  for (const train::RecipeField& f : train::recipe_fields()) {
    const std::string help = train::recipe_help(f);
    const bool one_default = train::defaults_by_task(f).empty();
    CLI::Option* opt = std::visit(
        [&](auto m) -> CLI::Option* {
          auto& field = tc.*m;
          using T = std::decay_t<decltype(field)>;
          if constexpr (std::is_same_v<T, bool>) {
            return t.add_flag(f.flag(), field, help);
          } else {
            CLI::Option* o = t.add_option(f.flag(), field, help);
            if constexpr (std::is_same_v<T, std::vector<int64_t>>) o->delimiter(',');
            if constexpr (std::is_arithmetic_v<T>)
              if (one_default) o->capture_default_str();
            if constexpr (std::is_same_v<T, std::string>)
              if (!field.empty() && one_default) o->capture_default_str();
            // --augment alone means the task's own augmentation (its value may follow).
            if (std::string(f.key) == "augment") o->expected(0, 1);
            return o;
          }
        },
        f.ref);
    if (f.flags & train::kHidden) opt->group("");
  }
}

// The recipe keys set by flags or by --config (which expand_config turned into flags).
std::set<std::string> given_recipe_keys(const CLI::App& t) {
  std::set<std::string> keys;
  for (const train::RecipeField& f : train::recipe_fields())
    if (t.count(f.flag()) > 0) keys.insert(f.key);
  return keys;
}

// The edit distance (Levenshtein) between a and b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of names to word, when it is close enough to be a likely typo ("" otherwise).
std::string closest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& n : names)
    if (const size_t d = edit_distance(word, n); d < best_d) {
      best = n;
      best_d = d;
    }
  return best;
}

// CLI11's parse error made useful: an unknown command gets "unknown command 'X'; commands: ...",
// and an unknown --flag of a command the closest flag it has. `args` in command-line order.
std::string explain_parse_error(CLI::App& app, const std::vector<std::string>& args,
                                const std::string& what) {
  std::vector<std::string> commands;
  for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    commands.push_back(s->get_name());
  const std::string list = fmt::format("{}", fmt::join(commands, ", "));
  if (args.empty() || args[0].empty() || args[0][0] == '-') {
    if (what.find("subcommand") == std::string::npos) return what;
    return "a command is required; commands: " + list;
  }
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    if (s->get_name() == args[0]) sub = s;
  if (!sub) {
    const std::string near = closest(args[0], commands);
    return "unknown command '" + args[0] + "'; commands: " + list +
           (near.empty() ? "" : " (did you mean " + near + "?)");
  }
  std::vector<std::string> flags;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
  std::string out = what;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string flag = args[i].substr(0, args[i].find('='));
    if (flag.rfind("--", 0) != 0 || flag.size() < 3 || sub->get_option_no_throw(flag)) continue;
    if (const std::string near = closest(flag, flags); !near.empty())
      out += "; " + flag + ": did you mean " + near + "?";
  }
  return out;
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
  fmt::print("{}\n", cli::version_line());
  cli::print_build_and_cpu();
  fmt::print("backends:\n");
  fmt::print("  cpu   oneDNN {}.{}.{}, {} threads (OpenMP)\n", v->major, v->minor, v->patch,
             ops::get_num_threads());
  if (!cuda_built())
    fmt::print("  cuda  not built (configure with -DHPCNET_CUDA=ON)\n");
  else if (!cuda_available())
    fmt::print("  cuda  built; no usable GPU here ({})\n", cuda_unavailable_reason());
  else
    fmt::print("  cuda  {}\n", cuda_describe());
  fmt::print("distributed: {}\n", dist::describe_build());
  cli::print_library_versions();
  fmt::print("models: {}\n", fmt::join(nn::model_names(), ", "));
  fmt::print("tasks: {}\n", fmt::join(task::task_names(), ", "));
  fmt::print("datasets: {}\n", fmt::join(data::dataset_formats(), ", "));
  return 0;
}

struct EvalArgs {
  std::string model, weights, dataset, data, split = "test";
  int64_t val_split = -1, batch_size = 500;
  int64_t max_image_pixels = data::kDefaultMaxImagePixels;
  int workers = 2, threads = 0;
  bool json = false, tta_flip = false, dataset_given = false, split_given = false;
  std::string device = "auto", save_json, precision = "fp32";
  int64_t imgsz = 0;  // 0: the model file's
};

// "a, b, c" of names, the first 10 and the count after them.
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t k = 0; k < names.size() && k < 10; ++k) s += (k ? ", " : "") + names[k];
  if (names.size() > 10) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

// The model's class names must be the dataset's, in the same order: its outputs are counted and
// printed under the dataset's names. A file that records no names (PyTorch-saved) or a dataset
// (or model) whose names are placeholders (class_0, ...) is taken as it is.
void check_eval_classes(const train::LoadedModel& m, const data::Dataset& ds,
                        const std::string& weights, const std::string& data_path) {
  const std::vector<std::string>& theirs = ds.classes();
  if (!m.classes_recorded || theirs == m.classes || data::placeholder_class_names(theirs) ||
      data::placeholder_class_names(m.classes))
    return;
  size_t k = 0;
  while (k < theirs.size() && k < m.classes.size() && theirs[k] == m.classes[k]) ++k;
  throw InputError(weights + ": the model's classes are " + name_list(m.classes) + "; --data " +
                   data_path + " names " + name_list(theirs) + " (class " + std::to_string(k) +
                   " is '" + m.classes[k] + "' in the model, '" + theirs[k] +
                   "' in the data): evaluate on the data it was trained for, whose classes are "
                   "the model's in its order");
}

int cmd_eval(const EvalArgs& given) {
  const Device dev = train::resolve_device(given.device);
  HPCNET_REQUIRE(given.threads >= 0, "--threads must be >= 0 (0 = all cores)");
  HPCNET_REQUIRE(given.workers >= 0 && given.workers <= 64, "--workers must be in [0, 64]");
  ops::set_num_threads(given.threads);
  HPCNET_REQUIRE(given.split == "test" || given.split == "val",
                 "--split must be test or val (got '" + given.split + "')");
  HPCNET_REQUIRE(given.batch_size >= 1, "--batch-size must be at least 1");
  data::set_max_image_pixels(given.max_image_pixels);
  train::check_inference_precision(given.precision);  // before the file is read
  HPCNET_REQUIRE(given.imgsz >= 0, "--imgsz must be at least 1 (0: the size in the model file)");
  train::LoadedModel m = train::load_model(given.weights, given.model);
  train::apply_inference_precision(given.precision, m, given.weights);
  if (given.imgsz > 0) m.imgsz = given.imgsz;
  m.module->to_(dev);
  const std::unique_ptr<task::Task> task = task_of(m);
  EvalArgs args = given;
  // The model's task says what --data is read as, as train does (segment: segmentation, detect:
  // detect, classify: cifar10, which also reads image folders; shards whatever the name).
  if (!given.dataset_given) args.dataset = train::task_default(task->name(), "dataset");
  // The default split, test, falls back to val on a dataset that has no test split (a data.yaml
  // without `test:`, a segmentation folder without images/test/), saying so.
  if (!given.split_given && data::has_split(args.dataset, args.data, "val") &&
      !data::has_split(args.dataset, args.data, "test")) {
    args.split = "val";
    std::fprintf(stderr, "eval: %s has no test split; evaluating val\n", args.data.c_str());
  }
  const EvalArgs& a = args;
  HPCNET_REQUIRE(a.save_json.empty() || task->writes_results(),
                 "--save-json: COCO results are written for detection models only");
  std::shared_ptr<const data::Dataset> ds;
  // Decoded as the task decodes them in training (a reduced JPEG scale where it changes nothing).
  auto opened = [&](std::shared_ptr<data::Dataset> d) {
    data::set_decode_min_side(*d, task->decode_min_side());
    return d;
  };
  data::DetectionData detection;  // detect: the image and category ids of the results file
  if (args.dataset == "detect" && !data::is_webdataset_path(a.data) &&
      (a.split == "test" || a.val_split < 0)) {
    detection = data::load_detection_dataset(a.data, a.split);
    for (const std::string& line : detection.report.lines())
      std::fprintf(stderr, "%s\n", line.c_str());
    ds = detection.dataset;
  } else if (a.split == "test" || (a.val_split < 0 && m.val_split == 0 &&
                                   data::has_split(args.dataset, a.data, a.split))) {
    ds = opened(data::open_dataset(args.dataset, a.data, a.split));  // the dataset's own split
  } else {
    int64_t vs = a.val_split >= 0 ? a.val_split : m.val_split;
    HPCNET_REQUIRE(vs > 0, "--split val needs --val-split N (the weights file records none)");
    auto full = opened(data::open_dataset(args.dataset, a.data, "train"));
    HPCNET_REQUIRE(vs < full->size(), "--val-split is larger than the training split");
    ds = std::make_shared<data::Subset>(full, data::split_train_val(full->size(), vs).val);
  }
  HPCNET_REQUIRE(ds->classes().size() == m.classes.size(),
                 a.weights + ": model has " + std::to_string(m.classes.size()) +
                     " classes, the dataset " + std::to_string(ds->classes().size()));
  HPCNET_REQUIRE(ds->target_kind() == task->target_kind(),
                 a.weights + ": a " + task->name() + " model needs a dataset of " +
                     data::target_kind_name(task->target_kind()) + " targets");
  check_eval_classes(m, *ds, a.weights, a.data);
  data::DataLoaderOptions o;
  o.batch_size = a.batch_size;
  o.num_workers = a.workers;
  data::DataLoader loader(ds, task->eval_transform(), o);
  std::unique_ptr<task::Metric> r = task::evaluate(*task, *m.module, loader, a.tta_flip);
  if (!a.save_json.empty()) {
    HPCNET_REQUIRE(detection.dataset, "--save-json needs the dataset's own split (not --val-split)");
    r->write_results(a.save_json, detection.image_ids, detection.category_ids);
    std::fprintf(stderr, "COCO results: %s\n", a.save_json.c_str());
  }
  if (a.json) {
    nlohmann::json j = {{"split", a.split}, {"tta", a.tta_flip ? "flip" : "none"}};
    j.update(r->to_json());
    std::cout << j.dump() << std::endl;
    return 0;
  }
  if (a.tta_flip) std::printf("(test-time augmentation: each image and its mirror image)\n");
  std::fputs(r->report(a.split).c_str(), stdout);
  return 0;
}

// `hpcnet export`: the weights as an ONNX model (opset 17) for onnxruntime, TensorRT, OpenVINO.
struct ExportArgs {
  std::string weights, model, format = "onnx", out, batch = "1", save_io;
  std::vector<int64_t> imgsz;  // {} (the trained size), {side} or {height, width}
};

int cmd_export(const ExportArgs& a) {
  HPCNET_REQUIRE(a.format == "onnx", "--format " + a.format + ": only onnx is supported");
  exporting::OnnxOptions o;
  if (a.batch == "dynamic") {
    o.dynamic_batch = true;
  } else {
    char* end = nullptr;
    o.batch = std::strtoll(a.batch.c_str(), &end, 10);
    HPCNET_REQUIRE(!a.batch.empty() && *end == '\0' && o.batch >= 1,
                   "--batch " + a.batch + ": expected a batch size >= 1 or 'dynamic'");
  }
  HPCNET_REQUIRE(a.imgsz.size() <= 2 && std::all_of(a.imgsz.begin(), a.imgsz.end(),
                                                     [](int64_t v) { return v > 0; }),
                 "--imgsz: expected a positive size or HEIGHT,WIDTH (480,640)");
  train::LoadedModel m = train::load_model(a.weights, a.model);
  o.height = o.width = a.imgsz.empty() ? m.imgsz : a.imgsz[0];
  if (a.imgsz.size() == 2) o.width = a.imgsz[1];
  o.model_name = m.name;
  o.task = m.task;
  o.classes = m.classes;
  // The task's output (detect: decoded as Ultralytics' exports) and input normalisation.
  const std::unique_ptr<task::Task> t = task_of(m);
  o.output = [&t](nn::Module& model, const Tensor& x) { return t->export_output(model, x); };
  const data::Compose eval_tf = t->eval_transform();  // kept: the loop reads its transforms
  for (const data::Transform& tr : eval_tf.transforms())
    if (const auto* n = std::get_if<data::Normalize>(&tr)) {
      o.mean = n->mean;
      o.std = n->std;
    }
  o.metadata = t->export_metadata();
  std::string out = a.out;
  if (out.empty()) out = (fs::path(a.weights).replace_extension(".onnx")).string();
  exporting::OnnxResult r = exporting::export_onnx(*m.module, o, out);
  if (!a.save_io.empty())
    save_safetensors(a.save_io, {{"input", r.sample_input}, {"output", r.sample_output}},
                     {{"format", "pt"}});
  std::printf("%s: %s, opset 17, input (%s, 3, %lld, %lld), %lld nodes, %lld parameters\n",
              out.c_str(), m.name.c_str(), o.dynamic_batch ? "batch" : a.batch.c_str(),
              static_cast<long long>(o.height), static_cast<long long>(o.width),
              static_cast<long long>(r.nodes), static_cast<long long>(r.parameters));
  std::string shape = "(N";
  for (int64_t i = 1; i < r.sample_output.dim(); ++i)
    shape += ", " + std::to_string(r.sample_output.size(i));
  std::printf("input: %s; output %s)\n", exporting::normalize_text(o).c_str(), shape.c_str());
  return 0;
}

int cmd_bench_loader(const train::BenchConfig& c, bool json) {
  const train::LoaderBenchResult r = train::run_loader_bench(c);
  if (json) {
    std::cout << nlohmann::json{{"data", c.data},
                                {"workers", c.workers},
                                {"batch_size", c.batch_size},
                                {"transform", r.transform},
                                {"cache", r.cache_line},
                                {"images", r.images},
                                {"seconds", r.seconds},
                                {"start_seconds", r.start_seconds},
                                {"images_per_sec", r.images_per_sec},
                                {"peak_rss_mb", r.peak_rss_mb}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("%s: %lld images, batch %lld, %d workers\n  %s\n  %s\n", c.data.c_str(),
              static_cast<long long>(r.images), static_cast<long long>(c.batch_size), c.workers,
              r.transform.c_str(), r.cache_line.c_str());
  std::printf("  opened in %.2f s; one epoch in %.2f s; peak RSS %.0f MB\n", r.start_seconds,
              r.seconds, r.peak_rss_mb);
  std::printf("loader: %.1f images/s\n", r.images_per_sec);
  return 0;
}

int cmd_bench(const train::BenchConfig& c, bool json) {
  train::BenchResult r = train::run_bench(c);
  std::string how;
  train::peak_fp32_gflops(ops::get_num_threads(), &how);
  if (json) {
    nlohmann::json j = {{"model", c.model},
                        {"device", c.device},
                        {"cuda_graph", r.cuda_graph},
                        {"precision", c.precision},
                        {"imgsz", c.imgsz},
                        {"batch_size", c.batch_size},
                        {"threads", ops::get_num_threads()},
                        {"steps", c.steps},
                        {"ms_per_step", 1000 * r.seconds_per_step},
                        {"images_per_sec", r.images_per_sec},
                        {"mflop_per_step", r.flops_per_step / 1e6},
                        {"gflops", r.gflops},
                        {"peak_gflops", r.peak_gflops},
                        {"system_allocs_per_step", r.system_allocs_per_step},
                        {"allocator_peak_mb", r.allocator_peak_mb},
                        {"allocator_held_mb", r.allocator_held_mb},
                        {"peak_rss_mb", r.peak_rss_mb}};
    for (auto& [name, v] : r.kernels)
      j["kernels"][name] = {{"ms_per_step", v[0]}, {"calls_per_step", v[1]}, {"gflops", v[2]}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  const bool cuda = c.device != "cpu";
  if (cuda)
    std::printf("%s, batch %lld, %s, %s, tf32 %s, %s, %lld steps\n", c.model.c_str(),
                static_cast<long long>(c.batch_size), c.device.c_str(), c.precision.c_str(),
                c.tf32 ? "on" : "off", r.cuda_graph ? "CUDA graph replays" : "eager",
                static_cast<long long>(c.steps));
  else
    std::printf("%s, batch %lld, %d threads, %s, conv algorithm %s, %lld steps\n",
                c.model.c_str(), static_cast<long long>(c.batch_size), ops::get_num_threads(),
                c.precision.c_str(), c.conv_algorithm.c_str(), static_cast<long long>(c.steps));
  std::printf("  %.3f ms/step, %.0f images/s, %.2f MFLOP/step, %.1f GFLOP/s", 1000 * r.seconds_per_step,
              r.images_per_sec, r.flops_per_step / 1e6, r.gflops);
  if (r.peak_gflops > 0)
    std::printf(" of %.0f peak (%.1f%%)\n  peak = %s\n", r.peak_gflops,
                100 * r.gflops / r.peak_gflops, how.c_str());
  else
    std::printf("\n");
  std::printf("  allocator misses per step in steady state: %llu\n",
              static_cast<unsigned long long>(r.system_allocs_per_step));
  std::printf("  memory: allocator peak in use %.0f MB, held %.0f MB (in use + cached), "
              "process peak RSS %.0f MB\n",
              r.allocator_peak_mb, r.allocator_held_mb, r.peak_rss_mb);
  if (!r.kernels.empty()) {
    if (cuda)  // CUDA events around each call on the device's stream
      std::printf("  (CUDA: each call's time on the GPU, between CUDA events on its stream; the "
                  "events themselves slow the profiled steps)\n");
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

struct ShardArgs {
  std::string data, out, dataset, split = "train", shard_size = "1GB";
  bool shuffle = false;
  uint64_t seed = 0;
};

int cmd_shard(const ShardArgs& a) {
  data::ShardOptions o;
  o.out = a.out;
  o.prefix = a.split;
  o.shard_size = data::parse_byte_size(a.shard_size, "--shard-size");
  o.shuffle = a.shuffle;
  o.seed = a.seed;
  const std::string name =
      a.dataset.empty() ? data::guess_dataset_name(a.data, a.split) : a.dataset;
  std::shared_ptr<data::Dataset> ds = data::open_dataset(name, a.data, a.split);
  std::printf("shard: %s (--dataset %s)\n", ds->describe().c_str(), name.c_str());
  const data::ShardReport r = data::write_shards(
      *ds, o, [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  std::printf(
      "shard: %lld samples in %zu shard%s, %.1f MB%s; classes in %s; read them with "
      "--data '%s'\n",
      static_cast<long long>(r.samples), r.shards.size(), r.shards.size() == 1 ? "" : "s",
      static_cast<double>(r.bytes) / 1e6,
      r.reencoded ? fmt::format(" ({} images encoded as PNG: no source file)", r.reencoded).c_str()
                  : "",
      r.classes_file.c_str(), r.pattern.c_str());
  if (r.dropped_crowd)
    std::printf("shard: %lld COCO crowd boxes not written (YOLO rows have no crowd flag)\n",
                static_cast<long long>(r.dropped_crowd));
  return 0;
}

// ---- the command line: one function per command's flags, then the parse and the dispatch

// " or "-joined names: "a, b or c".
std::string or_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

struct TrainArgs {
  train::TrainConfig config;
  std::string config_file;  // read by expand_config() before parsing; listed here for --help
  bool no_progress = false, force_progress = false;
};
struct BenchArgs {
  train::BenchConfig config;
  bool json = false, no_profile = false;
};
struct PlotArgs {
  std::string run_dir, out;
};

// Every command's flags and the subcommand that parsed them.
struct Cli {
  CLI::App app{
      "hpcnet: train and evaluate convolutional networks on CPUs (oneDNN), in C++.\n"
      "The tutorial run:  hpcnet train --data DIR --out runs/lenet",
      "hpcnet"};
  TrainArgs train;
  EvalArgs eval;
  PredictArgs predict;
  BenchArgs bench;
  ExportArgs exporting;
  PlotArgs plot;
  ShardArgs shard;
  QuantizeArgs quantize;
  CLI::App *train_cmd = nullptr, *eval_cmd = nullptr, *predict_cmd = nullptr, *bench_cmd = nullptr,
           *export_cmd = nullptr, *plot_cmd = nullptr, *shard_cmd = nullptr,
           *quantize_cmd = nullptr;
};

const char* const kMaxPixelsHelp =
    "refuse an image or mask whose header claims more pixels (width x height) than this, "
    "before decoding it (a guard against decompression bombs)";

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  CLI::App* t =
      app.add_subcommand("train", "train a model (the PyTorch CIFAR-10 tutorial by default)");
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  t->add_option("--config", a.config_file,
                "a JSON run recipe (configs/*.json); flags on the command line override it");
  add_recipe_flags(*t, a.config);
  t->add_flag("--no-progress", a.no_progress, "never draw the progress bar");
  t->add_flag("--progress", a.force_progress,
              "draw the progress bar even where it is off by default (stdout not a terminal; "
              "under mpirun, srun or torchrun, whose ranks may see a terminal that is not yours)");
  return t;
}

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  CLI::App* e = app.add_subcommand("eval", "accuracy of trained weights on a split, per class");
  e->add_option("--weights", a.weights, "model.safetensors (or checkpoint.safetensors)")
      ->required();
  e->add_option("--model", a.model, "model name (default: from the weights file)");
  e->add_option("--dataset", a.dataset,
                or_list(data::dataset_formats()) + " (default: the model's task's, " +
                    train::defaults_by_task(train::recipe_field("dataset")) +
                    "; shards are recognised from --data)");
  e->add_option("--save-json", a.save_json,
                "detect: also write the detections as a COCO results file (pycocotools' loadRes)");
  e->add_option("--data", a.data, "dataset folder or archive")->required();
  e->add_option("--split", a.split,
                "test or val (default: test; val where the dataset has no test split)")
      ->capture_default_str();
  e->add_option("--val-split", a.val_split,
                "size of the val split (default: from the weights file)");
  e->add_option("--batch-size", a.batch_size, "evaluation batch size")->capture_default_str();
  e->add_option("--workers", a.workers, "data-loading threads")->capture_default_str();
  e->add_option("--threads", a.threads, "CPU threads (0 = all cores)")->capture_default_str();
  e->add_option("--device", a.device, "auto, cpu or cuda")->capture_default_str();
  e->add_option("--imgsz", a.imgsz, "input size (0: the model file's)")->capture_default_str();
  e->add_option("--precision", a.precision,
                "fp32, bf16 (bfloat16 convolutions) or int8 (a model file made by `hpcnet "
                "quantize`: its calibrated convolutions in int8, the rest in bf16)")
      ->capture_default_str();
  e->add_option("--max-image-pixels", a.max_image_pixels, kMaxPixelsHelp)->capture_default_str();
  e->add_flag("--json", a.json, "print one JSON object instead of text");
  e->add_flag("--tta-flip", a.tta_flip,
              "test-time augmentation: classify each image and its left-right mirror, sum the "
              "logits (reported as such; training-time validation never uses it)");
  return e;
}

CLI::App* add_predict_command(CLI::App& app, PredictArgs& a) {
  CLI::App* p = app.add_subcommand(
      "predict", "predict images (JPEG or PNG) and videos (MP4, MKV, MOV, AVI, ...): files or folders");
  p->add_option("--weights", a.weights, "model.safetensors")->required();
  p->add_option("--model", a.model, "model name (default: from the weights file)");
  p->add_option("--top", a.top, "classes to show per image")->capture_default_str();
  p->add_option("--imgsz", a.imgsz,
                "input size the images are brought to (default: the size in the model file, "
                "the one it was trained at)");
  p->add_option("--threads", a.threads, "CPU threads (0 = all cores)");
  p->add_option("--device", a.device, "auto, cpu or cuda")->capture_default_str();
  p->add_option("--max-image-pixels", a.max_image_pixels, kMaxPixelsHelp)->capture_default_str();
  p->add_flag("--json", a.json, "one JSON object per image");
  task::PredictOptions& po = a.options;
  p->add_option("--conf", po.conf, "detect: smallest score of a box shown")->capture_default_str();
  p->add_option("--iou", po.iou, "detect: NMS IoU threshold")->capture_default_str();
  p->add_option("--max-det", po.max_det, "detect: most boxes per image")->capture_default_str();
  p->add_option("--save", a.save,
                "write pictures of the predictions there (segment: NAME_mask.png, an index PNG, "
                "and NAME_overlay.png; detect: NAME_boxes.png, the boxes drawn with class and "
                "score; a video: the annotated video NAME.mp4, in the source's container where "
                "hpcnet writes it) and predictions.jsonl (one line per image or video frame); a "
                "folder that holds files is kept and the results go into a new one beside it, "
                "NAME2, NAME3, ... (as Ultralytics)");
  p->add_option("--vid-stride", a.vid_stride,
                "videos: predict every N-th frame (the annotated video has those frames, at the "
                "source's frame rate / N)")
      ->capture_default_str();
  p->add_flag("--exist-ok", a.exist_ok,
              "--save into the folder given even when it holds earlier results (files of the "
              "same names are replaced)");
  p->add_option("--precision", a.precision,
                "fp32, or bf16: bfloat16 convolutions with float32 accumulation (CPUs with "
                "AVX-512; AMX where the CPU has it), or int8 for a model file made by `hpcnet "
                "quantize` (its calibrated convolutions in int8, VNNI or AMX; the rest bf16)")
      ->capture_default_str();
  p->add_flag("--stream-out", a.stream_out,
              "videos and streams: write the annotated frames to standard output as MJPEG (one "
              "JPEG per frame), e.g. `hpcnet predict ... --stream-out | ffplay -f mjpeg -`; the "
              "per-frame lines then go only to --save's predictions.jsonl");
  p->add_flag("--speed", a.speed,
              "print the timing line (\"Speed: 1.2ms preprocess, 31.5ms inference, 0.8ms "
              "postprocess per image at shape (1, 3, 640, 640)\") after images too; after videos "
              "it is always printed");
  p->add_option("--batch", a.batch,
                "videos: frames per forward pass (live sources: 1, they do not wait for more)")
      ->capture_default_str();
  p->add_option("--streams", a.streams,
                "video files on the CPU: forward passes run at once on different frames, the "
                "threads shared between them (a 2-thread yolov8n: 2 streams of 1 thread give "
                "about 1.3x the frames per second of one of 2); 0: 2 when there are 2 threads or "
                "more, else 1; live sources: 1")
      ->capture_default_str();
  p->add_option("--stream-timeout", a.stream_timeout,
                "network streams and --follow'ed files: seconds opening or a silence may last "
                "before the stream counts as gone (the file as finished)")
      ->capture_default_str();
  p->add_flag("--save-txt", a.save_txt,
              "with --save: YOLO label rows (class cx cy w h, normalised) of detection models in "
              "DIR/labels/NAME.txt, a video frame's in NAME_FRAME.txt (frames from 1), as "
              "Ultralytics' save_txt");
  p->add_flag("--save-conf", a.save_conf, "--save-txt's rows end with the score");
  p->add_option("--save-json", a.save_json,
                "write every image's and video frame's JSON line to this file (JSON Lines)");
  p->add_flag("--follow", a.follow,
              "video files that grow (being recorded): at their end wait for more, until none "
              "comes for --stream-timeout seconds; read as live sources");
  p->add_option("--input-format", a.input_format,
                "the inputs' format, as ffmpeg's -f: mjpeg (JPEG frames one after another), "
                "rawvideo (raw frames; with --video-size), ...; default: probed");
  p->add_option("--video-size", a.video_size, "raw frames: their size WxH (ffmpeg's -video_size)");
  p->add_option("--pixel-format", a.pixel_format,
                "raw frames: FFmpeg's pixel format name, e.g. rgb24, bgr24, yuv420p, gray "
                "(default rgb24)");
  p->add_option("--framerate", a.framerate,
                "frames per second of an input that does not say (raw frames, MJPEG; default 25)");
  p->add_option("images", a.images,
                "image and video files, folders (every image and video in them, sorted), network "
                "streams (rtsp://, http(s)://, tcp://, ...), cameras (/dev/video0 or 0), or - "
                "(standard input: a video, MJPEG or raw frames)")
      ->required();
  return p;
}

CLI::App* add_bench_command(CLI::App& app, BenchArgs& a) {
  train::BenchConfig& bc = a.config;
  CLI::App* b = app.add_subcommand("bench", "time training steps on synthetic data, per kernel");
  b->add_option("--model", bc.model, "model name")->capture_default_str();
  b->add_option("--imgsz", bc.imgsz, "input size (0 = the model's default)")->capture_default_str();
  b->add_option("--batch-size", bc.batch_size, "mini-batch size")->capture_default_str();
  b->add_option("--steps", bc.steps, "timed steps")->capture_default_str();
  b->add_option("--warmup", bc.warmup, "untimed steps first")->capture_default_str();
  b->add_option("--threads", bc.threads, "CPU threads (0 = all cores)")->capture_default_str();
  b->add_option("--precision", bc.precision, "fp32 or bf16 (bfloat16 convolutions)")
      ->capture_default_str();
  b->add_option("--conv-algorithm", bc.conv_algorithm,
                "float32 CPU convolutions: auto, direct or winograd")
      ->capture_default_str();
  b->add_option("--device", bc.device,
                "cpu, cuda or cuda:N (model, optimizer state and synthetic batches on it)")
      ->capture_default_str();
  b->add_flag("--tf32", bc.tf32, "CUDA: TF32 tensor cores for float32 (--tf32=false: off)")
      ->capture_default_str();
  b->add_flag("--deterministic", bc.deterministic,
              "CUDA: deterministic cuDNN backward convolutions only");
  b->add_flag("--cuda-graph", bc.cuda_graph,
              "CUDA: capture the whole step once as a CUDA graph and replay it (fixed shapes)");
  b->add_flag("--no-profile", a.no_profile, "time whole steps only (no per-kernel clock reads)");
  b->add_flag("--loader", bc.loader,
              "time the input pipeline alone over --data (decode, augment, batch); its last line "
              "is 'loader: N images/s'");
  b->add_option("--data", bc.data, "--loader: the dataset folder or archive");
  b->add_option("--dataset", bc.dataset, "--loader: imagefolder or cifar10")->capture_default_str();
  b->add_option("--augment", bc.augment, "--loader: imagenet, cifar, true or false")
      ->capture_default_str();
  b->add_option("--workers", bc.workers, "--loader: data-loading threads")->capture_default_str();
  b->add_option("--cache", bc.cache, "--loader: none, ram, disk or auto")->capture_default_str();
  b->add_option("--epochs", bc.epochs, "--loader: passes over the data (the last is timed)")
      ->capture_default_str();
  b->add_flag("--json", a.json, "print one JSON object");
  return b;
}

CLI::App* add_export_command(CLI::App& app, ExportArgs& a) {
  CLI::App* x = app.add_subcommand("export", "write trained weights as an ONNX model (opset 17)");
  x->add_option("--weights", a.weights, "model.safetensors (or checkpoint.safetensors)")
      ->required();
  x->add_option("--model", a.model, "model name (default: from the weights file)");
  x->add_option("--format", a.format, "onnx")->capture_default_str();
  x->add_option("--out", a.out, "output file (default: the weights' name with .onnx)");
  x->add_option("--imgsz", a.imgsz,
                "input size, or HEIGHT,WIDTH as Ultralytics' imgsz=[h, w] (default: the size it "
                "was trained at)")
      ->expected(1, 2)
      ->delimiter(',');
  x->add_option("--batch", a.batch, "batch size of the input, or 'dynamic'")->capture_default_str();
  x->add_option("--save-io", a.save_io,
                "also write the traced input and hpcnet's output to this safetensors file (to "
                "check an ONNX runtime against)");
  return x;
}

CLI::App* add_plot_command(CLI::App& app, PlotArgs& a) {
  CLI::App* pl = app.add_subcommand("plot", "draw a run's metrics.jsonl as results.png");
  pl->add_option("rundir", a.run_dir, "the run folder (train's --out)")->required();
  pl->add_option("--out", a.out, "the PNG file (default: RUNDIR/results.png)");
  return pl;
}

CLI::App* add_shard_command(CLI::App& app, ShardArgs& a) {
  CLI::App* sh = app.add_subcommand(
      "shard", "write a dataset as WebDataset tar shards (OUT/SPLIT-000000.tar, ...)");
  sh->footer(
      "Each sample is KEY.jpg|png (the source file's bytes), KEY.cls (classification), KEY.txt\n"
      "(YOLO rows, normalised) or KEY.mask.png (segmentation), and KEY.json ({\"source\": ...});\n"
      "keys are sample numbers (000000123); OUT/classes.txt names the classes. Read the shards\n"
      "with: hpcnet train --data 'OUT/train-{000000..000009}.tar' ... (see docs/data.md)");
  sh->add_option("--data", a.data, "the dataset to write: any folder, archive or file hpcnet reads")
      ->required();
  sh->add_option("--out", a.out, "the folder for the shards (created; must hold no SPLIT-*.tar)")
      ->required();
  sh->add_option("--dataset", a.dataset,
                 or_list(data::dataset_formats()) + " (default: guessed from --data)");
  sh->add_option("--split", a.split, "the split to write, also the shards' name prefix")
      ->capture_default_str();
  sh->add_option("--shard-size", a.shard_size,
                 "close a shard before it would pass this size (1GB, 500MB, 64KiB, bytes)")
      ->capture_default_str();
  sh->add_flag("--shuffle", a.shuffle, "write the samples in a random order (of --seed)");
  sh->add_option("--seed", a.seed, "the shuffle's seed")->capture_default_str();
  return sh;
}

void add_commands(Cli& c) {
  c.app.require_subcommand(1);
  c.app.set_version_flag("--version", cli::version_line());
  c.train_cmd = add_train_command(c.app, c.train);
  c.eval_cmd = add_eval_command(c.app, c.eval);
  c.predict_cmd = add_predict_command(c.app, c.predict);
  c.bench_cmd = add_bench_command(c.app, c.bench);
  c.export_cmd = add_export_command(c.app, c.exporting);
  c.plot_cmd = add_plot_command(c.app, c.plot);
  c.shard_cmd = add_shard_command(c.app, c.shard);
  c.quantize_cmd = add_quantize_command(c.app, c.quantize);
  c.app.add_subcommand("info", "build, backends and library versions");
}

// Parses the command line (after --config's expansion); an exit code when that ends the run
// (--help, --version, a usage error: one line), nothing when a command is to run.
std::optional<int> parse_command_line(Cli& c, int argc, char** argv) {
  std::vector<std::string> in_order;  // the arguments, for messages
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    try {
      args = expand_config(args, *c.train_cmd);
    } catch (const InputError& err) {
      std::fprintf(stderr, "hpcnet: error: %s\n", err.what());
      return 2;
    }
    in_order = args;
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    c.app.parse(args);
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) return c.app.exit(err);  // --help, --version
    // One line, like every other error (CLI11's own printer adds a second "Run with --help" line).
    std::string msg = explain_parse_error(c.app, in_order, err.what());
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    while (!msg.empty() && msg.back() == ' ') msg.pop_back();
    std::fprintf(stderr, "hpcnet: error: %s (see hpcnet --help)\n", msg.c_str());
    return 2;
  }
  return std::nullopt;
}

int cmd_train(TrainArgs& a, const CLI::App& cmd) {
  dist::world();  // joins the job's process group (MPI_Init_thread under mpirun or srun)
  train::TrainConfig& tc = a.config;
  tc.progress = a.no_progress ? 0 : a.force_progress ? 1 : -1;
  tc.given = given_recipe_keys(cmd);
  if (tc.augment.empty()) tc.augment = "true";  // --augment without a value
  const train::TrainResult r = train::run_training(tc, std::cout);
  dist::finalize();
  return r.exit_code;  // 130 / 143 when SIGINT / SIGTERM stopped it (checkpoint written)
}

// Runs the parsed command; its exit code.
int run_command(Cli& c) {
  if (c.train_cmd->parsed()) return cmd_train(c.train, *c.train_cmd);
  if (c.eval_cmd->parsed()) {
    c.eval.dataset_given = c.eval_cmd->count("--dataset") > 0;
    c.eval.split_given = c.eval_cmd->count("--split") > 0;
    return cmd_eval(c.eval);
  }
  if (c.predict_cmd->parsed()) {
    data::set_max_image_pixels(c.predict.max_image_pixels);
    return cmd_predict(c.predict);
  }
  if (c.bench_cmd->parsed()) {
    train::BenchConfig& bc = c.bench.config;
    bc.profile = !c.bench.no_profile;
    if (bc.loader) {
      if (c.bench_cmd->count("--batch-size") == 0) bc.batch_size = 64;
      return cmd_bench_loader(bc, c.bench.json);
    }
    return cmd_bench(bc, c.bench.json);
  }
  if (c.export_cmd->parsed()) return cmd_export(c.exporting);
  if (c.shard_cmd->parsed()) return cmd_shard(c.shard);
  if (c.quantize_cmd->parsed()) return cmd_quantize(c.quantize);
  if (c.plot_cmd->parsed()) {
    std::printf("%s\n", train::plot_run(c.plot.run_dir, c.plot.out).c_str());
    return 0;
  }
  return cmd_info();
}

}  // namespace

int main(int argc, char** argv) {
  // Before any OpenMP: a bounded spin-wait unless the user chose one (this may exec again).
  ops::apply_omp_wait_defaults(argv);
  Cli cli;
  add_commands(cli);
  if (const std::optional<int> done = parse_command_line(cli, argc, argv)) return *done;
  try {
    return run_command(cli);
  } catch (const InputError& err) {
    return exit_with_error(2, std::string("hpcnet: error: ") + err.what());
  } catch (const std::exception& err) {
    return exit_with_error(1, std::string("hpcnet: failed: ") + err.what());
  }
}
