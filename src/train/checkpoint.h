// The run-file format: the one writer and the one reader of model.safetensors and
// checkpoint.safetensors. A model file holds the model's state_dict under PyTorch's names plus
// metadata (hpcnet.model, .task, .classes, .imgsz, .normalize, .val_split); a checkpoint holds
// the same metadata, "model."-, "optim."- and "ema."-prefixed tensors and the training state
// (hpcnet.format = hpcnet-checkpoint-1, .epochs_done, .steps, .config, .rng_state, .world_size,
// .optimizer_steps, .last_opt_step, .data); written between two optimizer steps of an
// accumulation (--nbs), also the gradients summed so far ("grad."-prefixed, the parameters'
// names).
// Both are written through save_safetensors (temporary file, flush, rename).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hpcnet/rng.h"
#include "hpcnet/train.h"

namespace hpcnet::train {

inline constexpr const char* kCheckpointFormat = "hpcnet-checkpoint-1";

// What a checkpoint holds besides the model: where the run stands.
struct TrainState {
  int64_t epochs_done = 0;
  int64_t steps = 0;  // batches trained (Ultralytics' ni + 1)
  // Gradient accumulation (--nbs): optimizer steps taken (AdamW's bias correction, the EMA's
  // update count) and the batch index of the last one (-1: none yet). Without accumulation
  // optimizer_steps = steps and last_opt_step = steps - 1 (what a checkpoint without them means).
  int64_t optimizer_steps = 0;
  int64_t last_opt_step = -1;
  // A checkpoint written inside an epoch (--save-every, SIGINT/SIGTERM): the batches of epoch
  // epochs_done + 1 already trained, and the loss sums of that epoch and of the current log
  // window, so a resume continues the epoch and its loss lines exactly. 0 at an epoch's end.
  int64_t epoch_step = 0;
  double epoch_loss = 0, running_loss = 0;
  std::optional<double> best;  // the best validation metric so far (best.safetensors holds it)
  Rng::State rng{};
  nlohmann::json recipe;  // recipe_json() of the run
  // The data it trains on (hpcnet.data): {"path", "dataset", "train_images", "val_images",
  // "index"} (index: data::index_fingerprint of the training split and of a val split of the
  // dataset's own). Null in checkpoints written before the record existed.
  nlohmann::json data;
  int world_size = 1;     // informational: resume works on any rank count
};

// A run file as read: its metadata and its tensors by kind.
struct RunFile {
  std::string path;
  ModelMeta meta;
  std::map<std::string, Tensor> model, optim, ema;  // names without their "model."/"optim." prefix
                                                    // (ema keeps its "ema." names)
  std::map<std::string, Tensor> grad;  // accumulated gradients by parameter name (no "grad.")
  std::optional<TrainState> train;                  // set for checkpoints
};

// Reads a model file or a checkpoint (any safetensors file: one without hpcnet metadata reads as
// a model file of no named model). InputError naming the file for anything malformed, and for a
// tensor holding NaN or Inf (naming the tensor): such weights are never trained on, evaluated
// or used for predictions.
RunFile read_run_file(const std::string& path);

// What kind of run a file is of, for messages: "a lenet run (classify, 10 classes)"; with
// class_names, the first few names instead of the count.
std::string describe_run(const ModelMeta& meta, bool class_names = false);

// Refuses (InputError naming both files and both runs) a checkpoint copied into the folder of a
// run of another model, task or class list: the model files already in out_dir (model.safetensors,
// best.safetensors, read up to their headers) say what that run is. Files that are absent,
// unreadable or name no hpcnet model are passed over (a resume rewrites them).
void check_resume_folder(const RunFile& checkpoint, const std::string& out_dir);

// The writers refuse (RuntimeError naming the file and the tensor, the file left as it was) to
// write a tensor holding NaN or Inf: a diverged run never overwrites its last good files.
// Writes a model file (tensors: the state_dict, moved to the CPU).
void write_model_file(const std::string& path, const ModelMeta& meta, const nn::NamedTensors& model);
// Writes a checkpoint; grads: the gradients accumulated since the last optimizer step (empty at a
// step boundary).
void write_checkpoint(const std::string& path, const ModelMeta& meta, const nn::NamedTensors& model,
                      const nn::NamedTensors& optim, const nn::NamedTensors& ema,
                      const TrainState& state, const nn::NamedTensors& grads = {});

}  // namespace hpcnet::train
