#include "planning/run_plan.h"

#include <algorithm>

#include "parallel/grid.h"
#include "util/device.h"

namespace gputrain {

RunPlan plan_run(const Settings& recipe, const World& world, bool overwrite) {
  RunPlan p;
  p.world = world;
  p.lead = world.rank == 0;
  // dp auto = world / (tp x pp), resolved before a checkpoint's recipe is compared (and checked: a config error).
  p.dp = Grid(recipe.parallel, world.size).dp();
  // run.threads auto shares this machine's cores among its processes.
  p.threads = recipe.run.threads > 0 ? recipe.run.threads : std::max<int64_t>(1, resolve_threads(0) / world.local_size);
  p.device = device_for_local_rank(resolve_device(recipe.run.device), world.local_rank);
  // --overwrite starts afresh: the earlier run's checkpoints are not this run's to continue.
  p.resume = overwrite && recipe.checkpoint.resume == "auto" ? "never" : recipe.checkpoint.resume;
  p.group_world = world;
  if (recipe.kernels.cuda_graphs && p.device.is_cuda() && world.size == 1 && world.launched()) p.group_world = World{};
  p.batch = {recipe.train.per_device_batch_size, recipe.train.grad_accum_steps, recipe.train.global_batch_size};
  validate_for_world(recipe, run_world(p));
  return p;
}

RunWorld run_world(const RunPlan& p) {
  // Process groups: any world of several, and a launcher's world of one (parallel/process_groups.h).
  const bool groups = p.group_world.distributed() || p.group_world.launched();
  return RunWorld{p.dp, p.world.size, p.world.describe(), p.device.is_cuda(), groups};
}

Settings resolved_settings(const Settings& recipe, const RunPlan& plan) {
  Settings s = recipe;
  s.parallel.dp = plan.dp;
  s.checkpoint.resume = plan.resume;
  s.train.per_device_batch_size = plan.batch.per_device_batch_size;
  s.train.grad_accum_steps = plan.batch.grad_accum_steps;
  s.train.global_batch_size = plan.batch.global_batch_size;
  s.parallel.gather_dtype = s.resolved_gather_dtype();
  return s;
}

}  // namespace gputrain
