// What a run derives once from its recipe and the world it starts in: its place in the
// world, device and threads, the data-parallel degree, the resume mode and the batch split.
// The recipe's Settings are never written; the records a run writes (recipe.resolved.yaml,
// checkpoints, summary.json) take the recipe as resolved from resolved_settings().
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "config/settings.h"
#include "config/validate.h"
#include "parallel/world.h"

namespace gputrain {

// The batch as the resolved recipe states it. Batch size auto fills in the split when the
// finder chose it, or keeps a resumed checkpoint's (then global_batch_size is left out: 0).
struct BatchSplit {
  int64_t per_device_batch_size = 0;  // 0: auto, not chosen yet
  int64_t grad_accum_steps = 1;
  int64_t global_batch_size = 0;  // sequences per optimizer step over all processes (0: unset)
  bool chosen() const { return per_device_batch_size > 0; }
};

struct RunPlan {
  World world;  // the launcher's
  // The world the process groups span: a launcher's world of one under kernels.cuda_graphs trains
  // as the single process it is (its collectives could not be captured).
  World group_world;
  bool lead = true;  // rank 0: writes files and logs progress
  int64_t threads = 1;
  c10::Device device{c10::kCPU};
  int64_t dp = 1;      // data-parallel replicas: the grid's, resolved from parallel.dp auto
  std::string resume;  // checkpoint.resume as applied: --overwrite turns auto into never
  BatchSplit batch;

  // Sequences one process reads per optimizer step.
  int64_t sequences_per_rank() const { return batch.per_device_batch_size * batch.grad_accum_steps; }
};

// Everything but the batch split that batch size auto chooses later (choose_batch_split).
// Throws a ConfigError when the world does not fit the recipe (config/validate.h).
RunPlan plan_run(const Settings& recipe, const World& world, bool overwrite);

// The world as config/validate.h checks a recipe against it.
RunWorld run_world(const RunPlan& plan);

// The recipe with the plan's resolved values in: parallel.dp, checkpoint.resume, the batch split.
Settings resolved_settings(const Settings& recipe, const RunPlan& plan);

}  // namespace gputrain
