// Mean wall time of a repeated piece of work on a device, for the `bench`
// subcommands: one warm-up call (allocations, thread pools, kernel loading),
// then `repeats` calls between two device synchronizations.
#pragma once
#include <chrono>
#include <cstdint>

#include "util/device.h"

namespace gputrain {

template <class Work>
double mean_ms(const torch::Device& device, int64_t repeats, Work work) {
  work();
  synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < repeats; ++i) work();
  synchronize(device);
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - t0;
  return ms.count() / static_cast<double>(repeats);
}

}  // namespace gputrain
