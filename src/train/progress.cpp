// Terminal progress bar: "epoch 1/2 [#######.......] 51% 5760/11250 1840 img/s ETA 0:03".
#include "src/train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace hpcnet::train {

bool stdout_is_tty() { return isatty(STDOUT_FILENO) == 1; }

bool under_launcher() {
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "RANK", "LOCAL_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

bool show_progress_bar(int progress, bool tty, bool launched) {
  if (progress >= 0) return progress == 1;
  return tty && !launched;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

ProgressBar::ProgressBar(bool enabled, std::string label, int64_t total, int64_t images_per_step)
    : enabled_(enabled && total > 0),
      label_(std::move(label)),
      total_(total),
      images_per_step_(images_per_step),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

std::string fit_bar_line(const std::string& label, int64_t done, int64_t total, double per_sec,
                         const std::string& eta, int columns) {
  const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
  char counts[64], rate[48], pcts[8];
  std::snprintf(pcts, sizeof pcts, "%3d%%", pct);
  std::snprintf(counts, sizeof counts, " %lld/%lld", static_cast<long long>(done),
                static_cast<long long>(total));
  std::snprintf(rate, sizeof rate, " %.0f img/s", per_sec);
  const std::string tail = " ETA " + eta;
  // Parts in the order they are given up when the line does not fit: the rate, the counts, the
  // bar itself; the label, percentage and ETA stay (cut to the width as a last resort).
  const int budget = columns - 1;  // the last column stays empty: a full line would wrap
  bool with_rate = true, with_counts = true;
  auto fixed = [&] {
    return static_cast<int>(label.size() + 1 + std::strlen(pcts) + tail.size() +
                            (with_counts ? std::strlen(counts) : 0) +
                            (with_rate ? std::strlen(rate) : 0));
  };
  constexpr int kMinBar = 10, kMaxBar = 30;  // inside the brackets
  if (fixed() + kMinBar + 3 > budget) with_rate = false;
  if (fixed() + kMinBar + 3 > budget) with_counts = false;
  const int room = budget - fixed() - 3;  // " [" and "]"
  std::string line = label;
  if (room >= kMinBar) {
    const int width = std::min(room, kMaxBar);
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    line += " [" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  }
  line += std::string(" ") + pcts;
  if (with_counts) line += counts;
  if (with_rate) line += rate;
  line += tail;
  if (static_cast<int>(line.size()) > budget) line.resize(std::max(budget, 0));
  return line;
}

void ProgressBar::update(int64_t done) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? done / elapsed : 0;
  double eta = rate > 0 ? (total_ - done) / rate : 0;
  const std::string line =
      fit_bar_line(note_.empty() ? label_ : label_ + " (" + note_ + ")", done, total_,
                   rate * images_per_step_, format_duration(eta), terminal_columns());
  std::printf("\r%s\x1b[K", line.c_str());
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::printf("\r\x1b[K");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace hpcnet::train
