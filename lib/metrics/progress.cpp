#include "metrics/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace gputrain {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  return buf;
}

Progress::Progress(ProgressStyle style, int64_t total_steps) : style_(style), total_(total_steps) {
  if (style_ == ProgressStyle::kAuto) style_ = isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
}

Progress::~Progress() { finish(); }

void Progress::update(int64_t step, double loss, double tokens_per_s, double lr, double seconds_per_step) {
  if (style_ == ProgressStyle::kOff) return;
  const double eta = seconds_per_step * static_cast<double>(total_ - step);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | ETA %s", (long long)step,
                (long long)total_, loss, lr, tokens_per_s, format_duration(eta).c_str());
  show(line);
}

void Progress::show(const std::string& line) {
  if (style_ == ProgressStyle::kOff) return;
  if (style_ == ProgressStyle::kBar) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    open_line_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (open_line_) std::fprintf(stderr, "\n");
  open_line_ = false;
}

}  // namespace gputrain
