// Terminal progress bar: "epoch 1/2 [#######.......] 51% 5760/11250 1840 img/s ETA 0:03".
#include "src/train/progress.h"

#include <unistd.h>

#include <cmath>

namespace hpcnet::train {

bool stdout_is_tty() { return isatty(STDOUT_FILENO) == 1; }

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

void ProgressBar::update(int64_t done) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? done / elapsed : 0;
  double eta = rate > 0 ? (total_ - done) / rate : 0;
  const int width = 24;
  int filled = static_cast<int>(width * done / total_);
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::printf("\r%s [%s] %3d%% %lld/%lld %.0f img/s ETA %s\x1b[K", label_.c_str(), bar.c_str(),
              static_cast<int>(100 * done / total_), static_cast<long long>(done),
              static_cast<long long>(total_), rate * images_per_step_,
              format_duration(eta).c_str());
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
