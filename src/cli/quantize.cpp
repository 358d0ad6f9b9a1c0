// `hpcnet quantize` (src/cli/quantize.h).
#include "src/cli/quantize.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "src/cli/predict.h"
#include "src/nn/models/yolo.h"
#include "src/ops/ops.h"
#include "src/train/checkpoint.h"

namespace fs = std::filesystem;

namespace hpcnet::cli {

CLI::App* add_quantize_command(CLI::App& app, QuantizeArgs& a) {
  CLI::App* q = app.add_subcommand(
      "quantize", "int8 post-training quantisation of a YOLO model (for predict and eval "
                  "--precision int8)");
  q->footer(
      "Runs --images calibration images of --data (a detection data.yaml, its --split) through\n"
      "the model in float32, records the largest |x| of every int8-capable convolution's input\n"
      "(groups 1, 16 or more input channels) and writes the model file again with them.\n"
      "Then: hpcnet predict --weights OUT --precision int8 ..., hpcnet eval ... --precision int8.");
  q->add_option("--weights", a.weights, "the model file (model.safetensors) to quantise")
      ->required();
  q->add_option("--data", a.data, "the calibration images: a detection data.yaml")->required();
  q->add_option("--out", a.out, "the int8 model file (default: WEIGHTS with -int8 before .safetensors)");
  q->add_option("--split", a.split, "the split of --data to calibrate on")->capture_default_str();
  q->add_option("--images", a.images, "calibration images (the first of the split, in order)")
      ->capture_default_str();
  q->add_option("--batch-size", a.batch_size, "images per forward pass")->capture_default_str();
  q->add_option("--imgsz", a.imgsz, "input size (0: the size in the model file)")
      ->capture_default_str();
  q->add_option("--threads", a.threads, "compute threads (0 = all cores)")->capture_default_str();
  q->add_option("--workers", a.workers, "image decoding threads")->capture_default_str();
  return q;
}

int cmd_quantize(const QuantizeArgs& a) {
  HPCNET_REQUIRE(a.images >= 1, "--images must be at least 1");
  HPCNET_REQUIRE(a.batch_size >= 1, "--batch-size must be at least 1");
  HPCNET_REQUIRE(a.imgsz >= 0, "--imgsz must be at least 1 (0: the size in the model file)");
  HPCNET_REQUIRE(a.threads >= 0, "--threads must be >= 0 (0 = all cores)");
  HPCNET_REQUIRE(a.workers >= 0 && a.workers <= 64, "--workers must be in [0, 64]");
  ops::set_num_threads(a.threads);
  train::apply_precision("fp32");
  ops::set_int8_inference(false);
  train::LoadedModel m = train::load_model(a.weights);
  HPCNET_REQUIRE(m.task == "detect", "hpcnet quantize: int8 covers YOLO (detect) models; " +
                                         a.weights + " is a " + m.task + " model");
  if (a.imgsz > 0) m.imgsz = a.imgsz;
  const std::unique_ptr<task::Task> task = task_of(m);
  const data::DetectionData d = data::load_detection_dataset(a.data, a.split);
  HPCNET_REQUIRE(d.dataset->size() > 0, a.data + ": the " + a.split + " split has no images");
  data::DataLoaderOptions o;
  o.batch_size = a.batch_size;
  o.num_workers = a.workers;
  data::DataLoader loader(d.dataset, task->eval_transform(), o);
  NoGradGuard no_grad;
  m.module->eval();
  for (auto& [name, mod] : m.module->named_modules())
    if (auto* c = dynamic_cast<nn::YoloConv*>(mod)) c->int8_input_max = 0;  // a new calibration
  nn::set_int8_calibration(true);
  int64_t seen = 0;
  try {
    loader.begin_epoch(0);
    data::Batch b;
    while (seen < a.images && loader.next(b)) {
      task->infer(*m.module, b.images, false);
      seen += b.size;
    }
  } catch (...) {
    nn::set_int8_calibration(false);
    throw;
  }
  nn::set_int8_calibration(false);
  const std::map<std::string, double> ranges = nn::int8_ranges(*m.module);
  HPCNET_REQUIRE(!ranges.empty(), a.weights + ": no convolution can run in int8");
  train::RunFile f = train::read_run_file(a.weights);
  f.meta.int8_ranges = ranges;
  std::string out = a.out;
  if (out.empty()) {
    fs::path p(a.weights);
    out = (p.parent_path() / (p.stem().string() + "-int8.safetensors")).string();
  }
  train::save_model(out, *m.module, f.meta);
  std::printf("quantize: %lld %s images calibrated %zu convolutions for int8; wrote %s\n",
              static_cast<long long>(seen), a.split.c_str(), ranges.size(), out.c_str());
  return 0;
}

}  // namespace hpcnet::cli
