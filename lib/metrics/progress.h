// The console progress line: step/total, loss, tokens/s, ETA (or any
// status line, e.g. `data prepare`'s). On a terminal
// it redraws one line; in logs (SLURM, CI) it prints a line per log step.
#pragma once
#include <cstdint>
#include <string>

#include "config/settings.h"

namespace gputrain {

class Progress {
 public:
  Progress(ProgressStyle style, int64_t total_steps);
  ~Progress();
  void update(int64_t step, double loss, double tokens_per_s, double lr, double seconds_per_step);
  // Shows any status line in the chosen style (redrawn, or one per call).
  void show(const std::string& line);
  void finish();  // ends a redrawn line so the next message starts clean

 private:
  ProgressStyle style_;
  int64_t total_;
  bool open_line_ = false;
};

std::string format_duration(double seconds);

}  // namespace gputrain
