// summary.json's reports on parallelism (docs/metrics.md): how the gradient buckets overlapped
// backward, the pipeline's layout and bubble, memory per rank. parallel/ measures; these write
// the JSON, so the metrics contract's keys live in metrics/.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gputrain {

// The last step's gradient reductions (seconds from the last micro-batch's backward start).
struct GradSyncTimes {
  int64_t buckets = 0;
  double backward_end_s = 0;
  std::vector<double> bucket_start_s;  // when each bucket's reduction was launched
};
// "grad_sync": bucket count, how many started before backward ended, their start times; null without.
nlohmann::ordered_json grad_sync_report(const std::optional<GradSyncTimes>& t);

struct PipelineLayout {
  std::string schedule;       // "1f1b" | "gpipe"
  int64_t micro_batches = 0;  // the last step's
  double bubble_fraction = 0;
  std::vector<std::pair<int64_t, int64_t>> stage_blocks;  // per stage: [first, last) of the block stack
};
// "pipeline": schedule, micro-batches, bubble fraction, each stage's blocks; null without a pipeline.
nlohmann::ordered_json pipeline_report(const std::optional<PipelineLayout>& p);

// ZeRO-3's gathers of weights and reductions of gradients over this process's steps: how many, how
// much, and how long training waited for them (the rest of a prefetched gather overlapped compute).
struct ShardTraffic {
  int64_t gathers = 0, reductions = 0;
  double gathered_mb = 0, reduced_mb = 0;
  double gather_wait_s = 0, reduce_s = 0;
};
// "zero3": per step, rank 0's gathers and reductions, their MiB and the milliseconds waited; null without.
nlohmann::ordered_json shard_traffic_report(const std::optional<ShardTraffic>& t, int64_t steps);

struct RankMemory {
  double weights_mb = 0, grads_mb = 0, optimizer_state_mb = 0;
  // With a pipeline: the rank's stage, and at the last step's peak the micro-batches it held and the
  // memory in use above the step's start.
  std::optional<int64_t> stage;
  int64_t micro_batches_held = 0;
  double activations_mb = 0;
};
// "memory_per_rank": one object per rank, in rank order.
nlohmann::ordered_json memory_per_rank_report(const std::vector<RankMemory>& ranks);

}  // namespace gputrain
