// `hpcnet plot`: metrics.jsonl read into curves (read_run_curves), laid out as panels (run_panels)
// and drawn with PLplot's C API on the pngcairo device, two rows of panels on one page. PLplot keeps global state: one plot at a time,
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
#include <set>

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

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The detection metrics, which metrics.jsonl held as fractions before it said "metric_unit".
bool was_a_fraction(const std::string& key) {
  return key == "val_map50_95" || key == "val_map50" || key == "val_precision" ||
         key == "val_recall";
}

}  // namespace

RunCurves read_run_curves(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  if (!in) throw InputError(metrics_path + ": cannot open the metrics file");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  RunCurves c;
  std::map<double, double> loss, train_at_step, lr;
  std::map<std::string, std::map<double, double>> epoch;
  std::set<std::string> metric_keys, parts;
  bool percent = false;  // what the last "start" record said
  int64_t logs = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (lines[n].find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json r = nlohmann::json::parse(lines[n], nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      if (n + 1 == lines.size()) break;  // cut short by a crash
      throw InputError(metrics_path + ": line " + std::to_string(n + 1) + " is not a JSON object");
    }
    const std::string event = r.value("event", "");
    if (event == "start") percent = r.value("metric_unit", "") == "percent";
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
    for (const auto& [key, value] : r.items()) {
      const bool train = key.rfind("train_", 0) == 0, val = key.rfind("val_", 0) == 0;
      if (!train && !val) continue;
      double y = field(r, key.c_str());
      if (val && !ends_with(key, "_loss")) {
        metric_keys.insert(key);
        if (!percent && was_a_fraction(key)) y *= 100;
      } else if (key != "train_loss" && key != "val_loss" && ends_with(key, "_loss")) {
        parts.insert(key.substr(train ? 6 : 4));
      }
      put(epoch[key], e, y);
    }
    put(train_at_step, has_step ? field(r, "global_step") : e, field(r, "train_loss"));
    if (has_step) put(lr, field(r, "global_step"), field(r, "lr"));
  }
  c.train_loss = to_curve(loss);
  c.epoch_train_loss_at_step = to_curve(train_at_step);
  for (const auto& [key, m] : epoch) c.epoch[key] = to_curve(m);
  c.metric_keys.assign(metric_keys.begin(), metric_keys.end());
  c.loss_parts.assign(parts.begin(), parts.end());
  c.lr = to_curve(lr);
  return c;
}

std::vector<Panel> run_panels(const RunCurves& c) {
  static const Curve kNone;
  auto curve = [&](const std::string& key) -> const Curve* {
    auto it = c.epoch.find(key);
    return it == c.epoch.end() ? &kNone : &it->second;
  };
  const std::string steps = c.has_global_step ? "global step" : "log record";
  std::vector<Panel> p;
  if (!c.train_loss.empty() || c.epoch_train_loss_at_step.empty())
    p.push_back({"train loss (per log step)", steps, "loss", false, {{"train", &c.train_loss}}});
  else  // fewer steps than --log-every: the epochs' losses
    p.push_back({"train loss (per epoch: no log records)",
                 c.has_global_step ? "global step" : "epoch",
                 "loss",
                 false,
                 {{"train", &c.epoch_train_loss_at_step}}});
  p.push_back({"loss per epoch",
               "epoch",
               "loss",
               true,
               {{"train", curve("train_loss")}, {"val", curve("val_loss")}}});
  for (const std::string& part : c.loss_parts)
    p.push_back({part + " per epoch",
                 "epoch",
                 part,
                 true,
                 {{"train", curve("train_" + part)}, {"val", curve("val_" + part)}}});
  if (c.metric_keys.empty())
    p.push_back({"validation metric per epoch", "epoch", "validation metric (%)", true,
                 {{"val", &kNone}}});
  for (size_t k = 0; k < c.metric_keys.size(); k += 2) {
    const std::string& a = c.metric_keys[k];
    if (k + 1 == c.metric_keys.size()) {
      p.push_back({a + " per epoch", "epoch", a + " (%)", true, {{a.substr(4), curve(a)}}});
      continue;
    }
    const std::string& b = c.metric_keys[k + 1];
    p.push_back({a.substr(4) + ", " + b.substr(4) + " per epoch",
                 "epoch",
                 "%",
                 true,
                 {{a.substr(4), curve(a)}, {b.substr(4), curve(b)}}});
  }
  p.push_back({"learning rate", steps, "lr", false, {{"lr", &c.lr}}});
  return p;
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

// One panel on the next subpage: axes over every line's range (whole-number ticks for epochs),
// the lines (and their points when there are few), a legend when there are several lines, "no
// records" when all are empty.
void draw_panel(const Panel& panel) {
  const std::string &xlabel = panel.xlabel, &ylabel = panel.ylabel, &title = panel.title;
  const bool epochs = panel.epochs;
  struct Line {
    const Curve* curve;
    PLINT colour;
    const char* label;
  };
  std::vector<Line> lines;
  for (const auto& [label, curve] : panel.lines)
    lines.push_back({curve, lines.empty() ? kBlue : kOrange, label.c_str()});
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
  const std::vector<Panel> panels = run_panels(c);
  const PLINT columns = std::max<PLINT>(2, static_cast<PLINT>((panels.size() + 1) / 2));
  plspage(0, 0, 1600 + 600 * (columns - 2), 1100, 0, 0);
  plssub(columns, 2);
  plinit();
  plschr(0, 0.9);
  for (const Panel& p : panels) draw_panel(p);
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
