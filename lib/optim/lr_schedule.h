// Learning rate per step: linear warmup, then constant, cosine or linear decay
// to lr * min_lr_ratio at decay_steps (default train.max_steps), flat after.
#pragma once
#include <cstdint>

#include "config/settings.h"

namespace gputrain {

class LrSchedule {
 public:
  LrSchedule(const OptimSettings& o, int64_t max_steps);
  // The learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;

 private:
  double lr_, min_ratio_;
  ScheduleName name_;
  int64_t warmup_, decay_end_;
};

}  // namespace gputrain
