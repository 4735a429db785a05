// What a step sums over the world, one all-reduce each. Quantities counted once per model replica
// (the loss, its target tokens) are summed with only the ranks that hold them contributing (a
// replica's first tp rank and first pipeline stage), so one all-reduce serves every grid. On a
// single process each returns its input.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "metrics/parallel_reports.h"
#include "parallel/process_groups.h"

namespace gputrain {

// Counts of a step summed over every replica in one all-reduce (the objective's units, which
// normalize the loss, and the target tokens, which the throughput counts).
std::vector<int64_t> global_counts(const ProcessGroups& groups, std::vector<int64_t> local);
// Per-replica sums (an objective's metric sums, float64) summed over every replica, each counted once
// (its tp 0, cp 0 and last pipeline stage, where a pipeline's loss is computed).
torch::Tensor global_sums(const ProcessGroups& groups, torch::Tensor local);
// The one count of global_counts: a step's target tokens over every replica, say.
int64_t global_targets(const ProcessGroups& groups, int64_t local_targets);
// The loss summed over the replicas (each rank's is already divided by the global count, so this is
// the global mean), and whether any rank raised `flag` (a stop signal): one all-reduce for both.
// `per_chunk`: each context-parallel rank holds only its sequence chunks' share (a training step's),
// and they are summed too; else every cp rank of a replica holds the same, whole value.
std::pair<torch::Tensor, bool> sum_loss_and_any(const ProcessGroups& groups, const torch::Tensor& loss, bool flag,
                                                bool per_chunk = false);
// Every rank's memory (summary.json's "memory_per_rank"), in rank order: each rank gives its own.
std::vector<RankMemory> memory_per_rank(const ProcessGroups& groups, const RankMemory& mine);

}  // namespace gputrain
