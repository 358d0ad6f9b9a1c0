// The metrics of a training run, kept by rank 0: one sink that fans every record out to
// metrics.jsonl (all records), metrics.csv (a row per epoch) and a TensorBoard event file (the
// scalars of log and epoch records). docs/metrics.md is the schema of all three.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/io.h"

namespace hpcnet::train {

// The columns of metrics.csv for a task whose validation metric is metric_key ("val_accuracy",
// "val_miou"): epoch, step, time, train_loss, val_loss, <metric_key>, lr, seconds,
// images_per_sec.
std::vector<std::string> metrics_csv_columns(const std::string& metric_key);

// The TensorBoard scalars (tag, value) of one metrics.jsonl record, in this order:
//   "log" records:   loss -> train/loss
//   "epoch" records: train_loss -> train/epoch_loss, val_loss -> val/loss, every other val_X ->
//                    val/X (val/accuracy, val/miou), lr -> lr, images_per_sec -> images_per_sec
// Other records, and fields that are missing, null or not finite, give none.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record);

class RunMetrics {
 public:
  // lead: this process writes; any other rank's instance drops every record. dir: the run
  // directory (it exists). append: continue a resumed run's files (metrics.jsonl and metrics.csv
  // grow, and a new event file is added beside the earlier ones); otherwise both files start
  // empty and earlier event files in dir are removed (their curves would mix with this run's).
  // Throws InputError when a file cannot be created (see MetricsLog, CsvLog, TensorBoardWriter).
  RunMetrics(bool lead, const std::string& dir, bool append, const std::string& metric_key);

  // Adds "time" (unix seconds now, fractional) and "global_step" (optimizer steps so far) to the
  // record and writes it to metrics.jsonl; an "epoch" record also becomes a metrics.csv row, and
  // its scalars (tensorboard_scalars) an event at global_step.
  // Requires: record is a JSON object with a string "event".
  void write(nlohmann::json record, int64_t global_step);

 private:
  std::optional<MetricsLog> jsonl_;
  std::optional<CsvLog> csv_;
  std::optional<TensorBoardWriter> events_;
  std::string metric_key_;
};

}  // namespace hpcnet::train
