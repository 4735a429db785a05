// Seconds on the steady clock since a moment: how runs time their steps, saves, collectives and commands.
#pragma once
#include <chrono>

namespace gputrain {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace gputrain
