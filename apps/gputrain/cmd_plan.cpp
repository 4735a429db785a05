#include <cstdio>

#include "commands.h"
#include "config/recipe.h"
#include "train/batch_finder.h"
#include "train/memory_plan.h"

namespace gputrain::app {

int cmd_plan(const CommonArgs& a) {
  Recipe recipe = load_recipe(a.recipe, a.overrides);
  Settings s = recipe.settings;
  std::string batch_note;
  if (s.train.per_device_batch_size == 0) {
    // What the CPU finder would choose; on a GPU the run measures instead.
    const double budget = cpu_memory_budget_bytes(s);
    find_batch_size_cpu(s, budget).apply_to(s.train);
    char buf[160];
    std::snprintf(buf, sizeof buf, " (auto: the largest that fits %.0f MiB on CPU; a GPU run measures instead)",
                  budget / (1024.0 * 1024.0));
    batch_note = buf;
  }
  const MemoryPlan p = plan_memory(s, s.train.per_device_batch_size);
  const double tokens_per_step = static_cast<double>(s.tokens_per_step());
  std::printf("plan for %s\n", recipe.source.c_str());
  std::printf("parameters: %lld (%.2fM)\n", static_cast<long long>(p.parameters), p.parameters / 1e6);
  std::printf("training FLOPs per token: %.3g (6 N + 12 n_layer seq_len d_model); per step: %.3g\n",
              p.flops_per_token, p.flops_per_token * tokens_per_step);
  std::printf("micro-batch %lld x seq_len %lld, grad_accum_steps %lld: %.0f tokens per step%s\n",
              static_cast<long long>(s.train.per_device_batch_size), static_cast<long long>(s.model.seq_len),
              static_cast<long long>(s.train.grad_accum_steps), tokens_per_step, batch_note.c_str());
  std::printf("\n%s", memory_plan_table(s, p).c_str());
  std::printf("\nEstimates: real peaks add the framework's own memory and allocator slack (see README, Memory).\n");
  return 0;
}

}  // namespace gputrain::app
