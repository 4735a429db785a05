// checkpoint.max_wall_time: stop while one more step and a save still fit. The estimate is the
// slowest step seen (eval and logging included) plus the last save's duration (before the first
// save: a guess from its size). Each process trains at least one step, so a requeued job always
// makes progress and leaves a checkpoint to continue from. Rank 0's clock decides for all.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "util/stopwatch.h"

namespace gputrain {

class ProcessGroups;

class WallTimeGuard {
 public:
  // `limit_s` 0: no limit. `checkpoint_mb`: the model's fp32 weights and the optimizer state.
  WallTimeGuard(double limit_s, SteadyClock::time_point start, double checkpoint_mb)
      : limit_s_(limit_s), start_(start), checkpoint_mb_(checkpoint_mb) {}

  void step_took(double s) { slowest_step_s_ = s > slowest_step_s_ ? s : slowest_step_s_; }
  void save_took(double s) { last_save_s_ = s; }  // rank 0's saves, a background save's thread too

  // Whether to stop before the next step, agreed by every rank (an all-reduce only when a limit is set).
  bool near(const ProcessGroups& groups, bool lead) const;
  std::string stop_line(int64_t step) const;  // the warning the run stops with

 private:
  const double limit_s_;
  const SteadyClock::time_point start_;
  const double checkpoint_mb_;
  double slowest_step_s_ = 0;
  std::atomic<double> last_save_s_ = 0;
};

}  // namespace gputrain
