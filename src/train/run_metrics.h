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

#include "hpcnet/dist.h"
#include "hpcnet/io.h"

namespace hpcnet::train {

// What a task's epoch records hold besides the loop's own numbers: its validation numbers
// (task::Metric::value_keys(), the headline first: "val_accuracy"; detect "val_map50_95",
// "val_map50", "val_precision", "val_recall"), all in percent, and the names of its loss's parts
// (task::Task::loss_part_names(): detect "box_loss", "cls_loss", "dfl_loss"; usually none).
struct RunMetricKeys {
  std::vector<std::string> values;
  std::vector<std::string> loss_parts;
};

// Every number hpcnet writes for a metric (metrics.jsonl, metrics.csv, TensorBoard, eval --json)
// is in percent; a "start" record says so as "metric_unit": this value. Logs of earlier versions
// have no such field (their detection metrics were fractions).
inline constexpr const char* kMetricUnit = "percent";

// The columns of metrics.csv: epoch, step, time, train_loss, train_<part>..., val_loss,
// val_<part>..., the value keys, lr, seconds, images_per_sec. For one value and no parts (classify,
// segment): epoch, step, time, train_loss, val_loss, val_accuracy, lr, seconds, images_per_sec.
std::vector<std::string> metrics_csv_columns(const RunMetricKeys& keys);

// The TensorBoard scalars (tag, value) of one metrics.jsonl record, in this order:
//   "log" records:   loss -> train/loss
//   "epoch" records: train_loss -> train/epoch_loss, every other train_X -> train/X
//                    (train/box_loss), val_loss -> val/loss, every other val_X -> val/X
//                    (val/accuracy, val/miou, val/map50_95, val/box_loss), lr -> lr,
//                    images_per_sec -> images_per_sec
// Other records, and fields that are missing, null or not finite, give none.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record);

// The parts of the training loss summed over an epoch's steps on this rank (the loop adds each
// step's Task::last_loss_parts()).
class LossPartSums {
 public:
  explicit LossPartSums(std::vector<std::string> names)
      : names_(std::move(names)), sums_(names_.size(), 0.0) {}
  // Requires parts.size() == the number of names (a task that computed none adds nothing).
  void add(const std::vector<double>& parts);
  // Sums over the ranks of pg (every rank calls it) and sets rec[prefix + name] to each part's
  // mean per step and rank; nothing for a task without parts.
  void put_means(nlohmann::json& rec, const std::string& prefix, dist::ProcessGroup& pg);

 private:
  std::vector<std::string> names_;
  std::vector<double> sums_;
  double steps_ = 0;
};

// rec[prefix + names[k]] = values[k] (a record's loss parts, e.g. "val_box_loss").
void put_named(nlohmann::json& rec, const std::string& prefix,
               const std::vector<std::string>& names, const std::vector<double>& values);

class RunMetrics {
 public:
  // lead: this process writes; any other rank's instance drops every record. dir: the run
  // directory (it exists). append: continue a resumed run's files (metrics.jsonl and metrics.csv
  // grow, and a new event file is added beside the earlier ones); otherwise both files start
  // empty and earlier event files in dir are removed (their curves would mix with this run's).
  // A resumed run whose metrics.csv has the columns of an earlier version (a detection run before
  // its loss parts and other metrics were columns) keeps that file as metrics.<n>.csv beside a
  // new one.
  // Throws InputError when a file cannot be created (see MetricsLog, CsvLog, TensorBoardWriter).
  RunMetrics(bool lead, const std::string& dir, bool append, const RunMetricKeys& keys);

  // Adds "time" (unix seconds now, fractional) and "global_step" (optimizer steps so far) to the
  // record, and to a "start" record "metric_unit" (kMetricUnit), and writes it to metrics.jsonl;
  // an "epoch" record also becomes a metrics.csv row, and its scalars (tensorboard_scalars) an
  // event at global_step.
  // Requires: record is a JSON object with a string "event".
  void write(nlohmann::json record, int64_t global_step);

 private:
  std::optional<MetricsLog> jsonl_;
  std::optional<CsvLog> csv_;
  std::optional<TensorBoardWriter> events_;
};

}  // namespace hpcnet::train
