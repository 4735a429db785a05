#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gputrain {

LrSchedule::LrSchedule(const OptimSettings& o, int64_t max_steps)
    : lr_(o.lr),
      min_ratio_(o.schedule.min_lr_ratio),
      name_(o.schedule.name),
      warmup_(o.schedule.warmup_steps),
      decay_end_(o.schedule.decay_steps == 0 ? max_steps : o.schedule.decay_steps) {}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (name_ == ScheduleName::kConstant) return lr_;
  if (step >= decay_end_) return lr_ * min_ratio_;
  const double span = static_cast<double>(std::max<int64_t>(1, decay_end_ - warmup_));
  const double progress = static_cast<double>(step - warmup_) / span;  // [0, 1)
  const double shape =
      name_ == ScheduleName::kCosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return lr_ * (min_ratio_ + (1.0 - min_ratio_) * shape);
}

}  // namespace gputrain
