// Cross-field rules, run once after every key has been typed (DESIGN rule 4).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "config/diagnostics.h"
#include "config/recipe_rules.h"
#include "config/settings.h"

namespace gputrain {

void validate_settings(const Settings& s, const std::map<std::string, Origin>& origins, const RecipeRules& rules,
                       Diagnostics& diag);

// What a run knows only once it starts (planning/run_plan.h): the checks against it live here.
struct RunWorld {
  int64_t dp = 1;           // data-parallel replicas, parallel.dp auto resolved
  int64_t processes = 1;    // the launcher's world
  std::string description;  // the world for messages ("rank 0 of 2 ... from torchrun variables")
  bool on_gpu = false;
  bool process_groups = false;  // the run's collectives span several processes
};

// Throws a ConfigError when the recipe cannot run in this world (the global batch against dp,
// kernels.cuda_graphs in a multi-process run).
void validate_for_world(const Settings& s, const RunWorld& w);

// train.per_device_batch_size: auto in this world, checked before the finder runs.
void validate_batch_auto(const Settings& s, const RunWorld& w);

}  // namespace gputrain
