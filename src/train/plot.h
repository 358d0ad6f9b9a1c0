// `hpcnet plot RUNDIR`: the curves of a run's metrics.jsonl drawn as one PNG of four panels
// (train loss per log step, train and val loss per epoch, the validation metric per epoch, the
// learning rate), with PLplot's pngcairo driver. Training never needs it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpcnet::train {

// (x, y) points sorted by x; a later record at the same x replaces an earlier one (an epoch redone
// after a resume).
using Curve = std::vector<std::pair<double, double>>;

struct RunCurves {
  Curve train_loss;             // "log" records: (global_step, loss)
  Curve epoch_train_loss;       // "epoch" records: (epoch, train_loss)
  Curve epoch_val_loss;         // (epoch, val_loss)
  Curve metric;                 // (epoch, the val_X metric that is not val_loss)
  std::string metric_key;       // "val_accuracy", "val_miou"; "" when no epoch record has one
  Curve lr;                     // "log" and "epoch" records: (global_step, lr)
  bool has_global_step = true;  // false for logs of older versions: x is then the record's number
  int64_t records = 0;          // "log" and "epoch" records read
};

// Reads the curves of a metrics.jsonl. Null and non-numeric values are left out; a last line cut
// short by a crash is ignored.
// Throws InputError naming the file when it cannot be read or a line before the last is not a
// JSON object.
RunCurves read_run_curves(const std::string& metrics_path);

// Draws RUNDIR/metrics.jsonl into out_png ("" = RUNDIR/results.png), written to a temporary file
// in the same folder and renamed, so a failure leaves no half-written picture. Returns the path
// written.
// Throws InputError (one line) when run_dir is not a folder, has no metrics.jsonl, or the file
// has no log or epoch records; when out_png's folder does not exist; or when this build has no
// PLplot (-DHPCNET_PLOT=OFF) or PLplot has no pngcairo driver (Debian: plplot-driver-cairo).
std::string plot_run(const std::string& run_dir, const std::string& out_png);

}  // namespace hpcnet::train
