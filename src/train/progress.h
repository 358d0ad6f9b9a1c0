// A one-line progress bar with rate and ETA that fits the terminal's width, drawn with '\r' on a
// terminal; disabled elsewhere and under launchers.
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
  // A remark shown after the label ("data-bound: ..."); "" for none.
  void set_note(const std::string& note) { note_ = note; }
  ~ProgressBar() { clear(); }

 private:
  bool enabled_;
  std::string label_, note_;
  int64_t total_, images_per_step_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// Whether stdout is a terminal.
bool stdout_is_tty();
// Whether a launcher started this process (mpirun, srun, torchrun: their rank variables are set).
// Open MPI gives ranks a pseudo-terminal even when the user's own stdout is a file, so there a
// terminal says nothing about where the output goes.
bool under_launcher();
// --progress: 1 always, 0 never, -1 (auto) on a terminal outside a launcher.
bool show_progress_bar(int progress, bool tty, bool launched);
// The terminal's width (TIOCGWINSZ on stdout, else $COLUMNS, else 80).
int terminal_columns();
// "label [####......]  42% 5760/11250 1840 img/s ETA 0:03" in at most columns - 1 characters:
// the bar takes 10 to 30 of them; where even that does not fit, the rate, then the counts, then
// the bar are left out, and a line still too long is cut.
std::string fit_bar_line(const std::string& label, int64_t done, int64_t total, double per_sec,
                         const std::string& eta, int columns);
std::string format_duration(double seconds);  // "1:05" or "1:02:03"

}  // namespace hpcnet::train
