// `hpcnet plot RUNDIR`: the curves of a run's metrics.jsonl drawn as one PNG of panels (train loss
// per log step, train and val loss per epoch, each part of the loss per epoch, the validation
// metrics per epoch in percent, the learning rate), with PLplot's pngcairo driver. Training never
// needs it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hpcnet::train {

// (x, y) points sorted by x; a later record at the same x replaces an earlier one (an epoch redone
// after a resume).
using Curve = std::vector<std::pair<double, double>>;

struct RunCurves {
  Curve train_loss;  // "log" records: (global_step, loss)
  // "epoch" records: (epoch, value) per key: train_loss, val_loss, the loss parts train_X and
  // val_X (train_box_loss), the validation metrics (val_accuracy, val_map50_95) in percent.
  std::map<std::string, Curve> epoch;
  Curve epoch_train_loss_at_step;  // (global_step, train_loss): the train loss without log records
  std::vector<std::string> metric_keys;  // the val_X that are not losses, sorted
  std::vector<std::string> loss_parts;   // X of train_X / val_X ending in _loss (box_loss), sorted
  Curve lr;                     // "log" and "epoch" records: (global_step, lr)
  bool has_global_step = true;  // false for logs of older versions: x is then the record's number
  int64_t records = 0;          // "log" and "epoch" records read
};

// Reads the curves of a metrics.jsonl. Null and non-numeric values are left out; a last line cut
// short by a crash is ignored. Detection metrics (val_map50_95, val_map50, val_precision,
// val_recall) of records that no "start" record with "metric_unit": "percent" precedes (files of
// earlier versions, which wrote them as fractions) are multiplied by 100.
// Throws InputError naming the file when it cannot be read or a line before the last is not a
// JSON object.
RunCurves read_run_curves(const std::string& metrics_path);

// One panel of the picture: its lines, each (label, points).
struct Panel {
  std::string title, xlabel, ylabel;
  bool epochs = false;  // x is the epoch: a tick per epoch when there are few
  std::vector<std::pair<std::string, const Curve*>> lines;
};

// The panels drawn, in order: train loss (per log step; without log records the epochs' train
// loss at their global step, so a run with fewer steps than --log-every still has a curve), loss
// per epoch (train, val), one per loss part (train, val), the validation metrics two to a panel
// (y in percent; one empty panel when there are none), the learning rate. The curves are c's.
std::vector<Panel> run_panels(const RunCurves& c);

// Draws RUNDIR/metrics.jsonl into out_png ("" = RUNDIR/results.png; 1600 x 1100 for up to four
// panels, 600 pixels wider per column of two beyond), written to a temporary file
// in the same folder and renamed, so a failure leaves no half-written picture. Returns the path
// written.
// Throws InputError (one line) when run_dir is not a folder, has no metrics.jsonl, or the file
// has no log or epoch records; when out_png's folder does not exist; or when this build has no
// PLplot (-DHPCNET_PLOT=OFF) or PLplot has no pngcairo driver (Debian: plplot-driver-cairo).
std::string plot_run(const std::string& run_dir, const std::string& out_png);

}  // namespace hpcnet::train
