// `gputrain plan --world-size N`: what one rank holds between steps under the recipe's
// parallel.zero, tp, pp and ep: its weights, gradients and optimizer state, per pipeline stage (the
// quantities a run reports in summary.json's memory_per_rank), and DPO's frozen reference copy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"
#include "parallel/grid.h"

namespace gputrain {

struct RankHoldings {
  int64_t stage = 0;
  double weights = 0, gradients = 0, optimizer = 0;  // bytes held between steps
  // ZeRO-3: the largest unit's whole weights (embeddings, a block or the head), gathered while in use.
  double largest_unit = 0;
  // The most optimizer state any dp rank of the stage holds (ZeRO-1/2 owners differ; else `optimizer`).
  double largest_optimizer = 0;
  // DPO's frozen reference copy (objective/objectives.h holds_frozen_reference), laid out as the
  // policy: this rank's share of it (0 without one).
  double reference = 0;
};

// One entry per pipeline stage, for its dp rank 0 and tp rank 0 (and the largest optimizer share).
std::vector<RankHoldings> plan_rank_memory(const Settings& s, const Grid& g);

// A Markdown table of plan_rank_memory in MiB, with a line on how it is counted.
std::string rank_memory_table(const Settings& s, const Grid& g);

}  // namespace gputrain
