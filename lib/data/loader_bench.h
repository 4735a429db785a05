// `gputrain data bench`: how fast the loader of a recipe's data.train
// produces batches, with 0..N worker threads, next to what training consumes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct LoaderBenchRow {
  int64_t workers = 0;
  int64_t batches = 0;
  double seconds = 0;
  double tokens_per_s = 0;
};

// A GPT-2 124M training step on one H100 (bf16, torch.compile-class speed)
// consumes about this many tokens per second: the bar the loader must clear
// by 10x so that the GPU never waits for data.
constexpr double kH100Gpt2TokensPerS = 500'000.0;

// Runs the recipe's train loader for `batches` batches (after a short warm-up)
// with each worker count in `workers`, on the recipe's device.
std::vector<LoaderBenchRow> bench_loader(const Settings& s, const std::vector<int64_t>& workers, int64_t batches);

std::string loader_bench_table(const std::vector<LoaderBenchRow>& rows);

}  // namespace gputrain
