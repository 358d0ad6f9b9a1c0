// A one-line progress bar with rate and ETA, drawn with '\r' on a terminal; disabled elsewhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hpcnet::train {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, int64_t total, int64_t images_per_step);
  // Redraws at most ~10 times a second.
  void update(int64_t done);
  // Erases the bar (before printing a normal line, and at the end).
  void clear();
  ~ProgressBar() { clear(); }

 private:
  bool enabled_;
  std::string label_;
  int64_t total_, images_per_step_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// Whether stdout is a terminal.
bool stdout_is_tty();
std::string format_duration(double seconds);  // "1:05" or "1:02:03"

}  // namespace hpcnet::train
