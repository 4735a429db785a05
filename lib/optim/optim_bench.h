// `gputrain optim bench`: the optimizer step alone (no forward/backward) on
// the recipe's model and device, for every optimizer and update kernel, next
// to LibTorch's own torch::optim::AdamW: bytes of state per parameter and
// milliseconds per step. docs/benchmarks.md records its tables.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct OptimBenchRow {
  std::string optimizer;  // "adamw", ..., "torch::optim::AdamW"
  std::string kernel;     // "fused (C++ loop)", ...
  double state_bytes_per_param = 0;
  double step_ms = 0;  // mean over the timed steps
};

struct OptimBenchResult {
  int64_t parameters = 0;
  std::string device;
  int64_t threads = 0;
  std::vector<OptimBenchRow> rows;
};

// Times `steps` steps (after one warm-up step) of each optimizer in turn;
// each one's state is freed before the next is built.
OptimBenchResult bench_optimizers(const Settings& s, int64_t steps);

std::string optim_bench_table(const OptimBenchResult& r);

}  // namespace gputrain
