#include "train/wall_time_guard.h"

#include <fmt/format.h>

#include "parallel/process_groups.h"

namespace gputrain {

bool WallTimeGuard::near(const ProcessGroups& groups, bool lead) const {
  if (limit_s_ <= 0) return false;
  bool near = false;
  if (lead && slowest_step_s_ > 0) {
    const double save_s = last_save_s_ > 0 ? last_save_s_.load() : 1.0 + checkpoint_mb_ / 200.0;
    near = seconds_since(start_) + 1.2 * (slowest_step_s_ + save_s) > limit_s_;
  }
  return groups.any_rank(near, "agreement on max_wall_time");
}

std::string WallTimeGuard::stop_line(int64_t step) const {
  return fmt::format("checkpoint.max_wall_time ({:.0f} s) is near after {:.0f} s: saving and stopping at step {}",
                     limit_s_, seconds_since(start_), step);
}

}  // namespace gputrain
