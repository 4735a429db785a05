// summary.json (the metrics contract, docs/metrics.md): what a run has done, built from its
// counters on every exit path.
#pragma once
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "checkpoint/training_checkpoint.h"
#include "config/settings.h"
#include "optim/optimizer.h"

namespace gputrain {

// The counters a checkpoint saves (TrainingCounters), and what only this process knows.
struct RunTotals : TrainingCounters {
  double mem_start_mb = 0;    // CPU: resident memory before the model was built (LibTorch, data maps)
  std::string stop_reason;    // why a run stopped early: "SIGTERM", "max_wall_time", ...
  int64_t resumed_from = -1;  // the checkpoint step this process started at
};

// What the summary reports besides the counters and the resolved recipe.
struct SummaryFacts {
  c10::Device device{c10::kCPU};
  int64_t threads = 1;
  int64_t parameters = 0;     // the whole model's
  int64_t skipped_steps = 0;  // fp16 overflows and train.nan_policy: skip
  std::optional<double> entropy_floor;
  double wall_s = 0;  // this process's
};

// What the world and the run's techniques add, each part built by its owner (null: the run has none).
struct SummaryParts {
  int world_size = 1;
  std::optional<double> mfu;  // metrics/flops.h: where the GPU's peak is known
  nlohmann::ordered_json data_sources, lora, moe, cuda_graphs, spikes;
  int64_t bf16_copy_tensors = 0, bf16_copy_bytes = 0;  // train/weight_copies.h
  nlohmann::ordered_json parallel;                     // distributed runs: "zero", "grid", "pipeline" (merged in)
};

// The keys every summary has, for a run that ended with `status`, then `parts`' (summary.json's
// order: docs/metrics.md).
nlohmann::ordered_json build_summary(const std::string& status, const RunTotals& t, const Settings& s,
                                     const Optimizer& optimizer, const SummaryFacts& f, const SummaryParts& parts = {});

// The last log line: "ok: 40 steps, 10240 tokens in 3s, 3413 tokens/s; final loss 2.1, eval loss 2.2".
std::string finish_line(const std::string& status, const RunTotals& t, double wall_s, double tokens_per_s);

// summary.json's "tokens_per_s": the whole run's tokens over its training seconds, resumed parts
// included (rounded as the summary writes it; 0 before any step).
double run_tokens_per_s(const RunTotals& t);

// `v` rounded to `digits` decimals, as the metrics files write numbers.
double round_to(double v, int digits);

}  // namespace gputrain
