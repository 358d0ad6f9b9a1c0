// `hpcnet plot`: metrics.jsonl read into curves (read_run_curves) and drawn with PLplot's C API on
// the pngcairo device, 2 x 2 panels on one page. PLplot keeps global state: one plot at a time,
// plinit ... plend within plot_run, and a PLplot error ends the process (its exit handler says so
// on one line).
#include "src/train/plot.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "hpcnet/error.h"

#ifdef HPCNET_WITH_PLPLOT
#include <plplot/plplot.h>
#endif

namespace fs = std::filesystem;

namespace hpcnet::train {

namespace {

// The record's field as a finite number, or NaN.
double field(const nlohmann::json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nan("");
  const double v = it->get<double>();
  return std::isfinite(v) ? v : std::nan("");
}

Curve to_curve(const std::map<double, double>& m) { return Curve(m.begin(), m.end()); }

}  // namespace

RunCurves read_run_curves(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  if (!in) throw InputError(metrics_path + ": cannot open the metrics file");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  RunCurves c;
  std::map<double, double> loss, etrain, eval_loss, metric, lr;
  int64_t logs = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (lines[n].find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json r = nlohmann::json::parse(lines[n], nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      if (n + 1 == lines.size()) break;  // cut short by a crash
      throw InputError(metrics_path + ": line " + std::to_string(n + 1) + " is not a JSON object");
    }
    const std::string event = r.value("event", "");
    if (event != "log" && event != "epoch") continue;
    ++c.records;
    const bool has_step = r.contains("global_step") && r["global_step"].is_number();
    if (!has_step) c.has_global_step = false;
    auto put = [](std::map<double, double>& m, double x, double y) {
      if (std::isfinite(x) && std::isfinite(y)) m[x] = y;
    };
    if (event == "log") {
      ++logs;
      const double x = has_step ? field(r, "global_step") : static_cast<double>(logs);
      put(loss, x, field(r, "loss"));
      put(lr, x, field(r, "lr"));
      continue;
    }
    const double e = field(r, "epoch");
    put(etrain, e, field(r, "train_loss"));
    put(eval_loss, e, field(r, "val_loss"));
    for (const auto& [key, value] : r.items())
      if (key.rfind("val_", 0) == 0 && key != "val_loss") {
        if (c.metric_key.empty()) c.metric_key = key;
        if (key == c.metric_key) put(metric, e, field(r, key.c_str()));
      }
    if (has_step) put(lr, field(r, "global_step"), field(r, "lr"));
  }
  c.train_loss = to_curve(loss);
  c.epoch_train_loss = to_curve(etrain);
  c.epoch_val_loss = to_curve(eval_loss);
  c.metric = to_curve(metric);
  c.lr = to_curve(lr);
  return c;
}

#ifdef HPCNET_WITH_PLPLOT
namespace {

// cmap0 entries: 0 is the page's background.
enum Colour : PLINT { kWhite = 0, kBlack = 1, kBlue = 2, kOrange = 3, kGrey = 4, kLight = 5 };

int on_plplot_exit(const char* message) {
  std::fflush(stdout);
  std::fprintf(stderr, "hpcnet: failed: PLplot: %s\n", message ? message : "error");
  return 1;
}

bool has_pngcairo() {
  const char* menus[256];
  const char* names[256];
  const char** pm = menus;
  const char** pn = names;
  int n = 256;
  plgDevs(&pm, &pn, &n);
  for (int i = 0; i < n; ++i)
    if (std::string(names[i]) == "pngcairo") return true;
  return false;
}

struct Line {
  const Curve* curve;
  PLINT colour;
  const char* label;
};

// One panel on the next subpage: axes over every line's range (whole-number ticks for epochs),
// the lines (and their points when there are few), a legend when there are several lines, "no
// records" when all are empty.
void draw_panel(const std::vector<Line>& lines, const std::string& xlabel,
                const std::string& ylabel, const std::string& title, bool epochs) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t points = 0;
  for (const Line& l : lines)
    for (const auto& [x, y] : *l.curve) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      ++points;
    }
  pladv(0);
  plvsta();
  plcol0(kBlack);
  if (points == 0) {
    plwind(0, 1, 0, 1);
    plbox("bc", 0, 0, "bc", 0, 0);
    pllab(xlabel.c_str(), ylabel.c_str(), title.c_str());
    plcol0(kGrey);
    plptex(0.5, 0.5, 1, 0, 0.5, "no records");
    return;
  }
  if (x1 - x0 <= 0) x0 -= 0.5, x1 += 0.5;
  const double xpad = 0.02 * (x1 - x0);
  x0 -= xpad, x1 += xpad;
  const double pad = y1 - y0 > 0 ? 0.06 * (y1 - y0) : std::max(0.1 * std::abs(y0), 1e-3);
  y0 -= pad, y1 += pad;
  plwind(x0, x1, y0, y1);
  const bool whole = epochs && x1 - x0 <= 12;  // a tick per epoch
  plcol0(kLight);
  plbox("g", whole ? 1 : 0, whole ? 1 : 0, "g", 0, 0);
  plcol0(kBlack);
  plbox("bcnst", whole ? 1 : 0, whole ? 1 : 0, "bcnstv", 0, 0);
  pllab(xlabel.c_str(), ylabel.c_str(), title.c_str());
  for (const Line& l : lines) {
    std::vector<PLFLT> xs, ys;
    for (const auto& [x, y] : *l.curve) xs.push_back(x), ys.push_back(y);
    if (xs.empty()) continue;
    plcol0(l.colour);
    plwidth(2);
    if (xs.size() > 1) plline(static_cast<PLINT>(xs.size()), xs.data(), ys.data());
    if (xs.size() <= 50) plpoin(static_cast<PLINT>(xs.size()), xs.data(), ys.data(), 17);
    plwidth(1);
  }
  std::vector<PLINT> colours;  // the legend: the lines that have points, when there are several
  std::vector<const char*> text;
  for (const Line& l : lines)
    if (!l.curve->empty()) colours.push_back(l.colour), text.push_back(l.label);
  if (colours.size() < 2) return;
  std::vector<PLINT> opts(colours.size(), PL_LEGEND_LINE), styles(colours.size(), 1);
  std::vector<PLFLT> widths(colours.size(), 2);
  PLFLT w = 0, h = 0;
  pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.02, 0.02, 0.08, kWhite,
           kBlack, 1, 0, 0, static_cast<PLINT>(colours.size()), opts.data(), 1.0, 0.9, 2.0, 1.0,
           colours.data(), text.data(), nullptr, nullptr, nullptr, nullptr, colours.data(),
           styles.data(), widths.data(), nullptr, nullptr, nullptr, nullptr);
}

}  // namespace
#endif

std::string plot_run(const std::string& run_dir, const std::string& out_png) {
  std::error_code ec;
  HPCNET_REQUIRE(fs::is_directory(run_dir, ec), run_dir + ": no such run folder");
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  HPCNET_REQUIRE(fs::is_regular_file(metrics, ec),
                 metrics + ": not found (is " + run_dir + " the --out of hpcnet train?)");
  const RunCurves c = read_run_curves(metrics);
  HPCNET_REQUIRE(c.records > 0, metrics + ": no log or epoch records to plot yet");
  const std::string out = out_png.empty() ? (fs::path(run_dir) / "results.png").string() : out_png;
  const fs::path folder = fs::path(out).parent_path();
  HPCNET_REQUIRE(folder.empty() || fs::is_directory(folder, ec),
                 "--out " + out + ": the folder " + folder.string() + " does not exist");
#ifndef HPCNET_WITH_PLPLOT
  throw InputError(
      "hpcnet plot: this build has no PLplot (install libplplot-dev "
      "plplot-driver-cairo and configure with -DHPCNET_PLOT=ON)");
#else
  HPCNET_REQUIRE(has_pngcairo(),
                 "hpcnet plot: PLplot has no pngcairo driver (Debian: plplot-driver-cairo)");
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream probe(tmp, std::ios::binary | std::ios::trunc);
    HPCNET_REQUIRE(probe.good(), "--out " + out + ": cannot write there");
  }
  plsexit(on_plplot_exit);
  // cmap0: white page, black axes and text, the lines' colours, grey notes, light-grey grid.
  const PLINT r[] = {255, 0, 31, 255, 128, 220}, g[] = {255, 0, 119, 127, 128, 220},
              b[] = {255, 0, 180, 14, 128, 220};
  plscmap0(r, g, b, 6);
  plsdev("pngcairo");
  plsfnam(tmp.c_str());
  plspage(0, 0, 1600, 1100, 0, 0);
  plssub(2, 2);
  plinit();
  plschr(0, 0.9);
  const std::string steps = c.has_global_step ? "global step" : "log record";
  draw_panel({{&c.train_loss, kBlue, "train"}}, steps, "loss", "train loss (per log step)", false);
  draw_panel({{&c.epoch_train_loss, kBlue, "train"}, {&c.epoch_val_loss, kOrange, "val"}}, "epoch",
             "loss", "loss per epoch", true);
  const std::string key = c.metric_key.empty() ? "validation metric" : c.metric_key;
  draw_panel({{&c.metric, kOrange, "val"}}, "epoch", key + " (%)", key + " per epoch", true);
  draw_panel({{&c.lr, kBlue, "lr"}}, steps, "lr", "learning rate", false);
  plend();
  fs::rename(tmp, out, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(out + ": cannot rename the plot into place: " + ec.message());
  }
  return out;
#endif
}

}  // namespace hpcnet::train
