#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "config/validate.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "parallel/grid.h"
#include "parallel/grid_table.h"
#include "train/batch_finder.h"
#include "planning/memory_plan.h"
#include "planning/rank_memory_plan.h"

namespace gputrain::app {

namespace {

// The pipeline section: micro-batches, each schedule's idle fraction, and
// how many micro-batches' activations each stage holds at its peak.
void print_pipeline(const Settings& s, const Grid& g, const MemoryPlan& whole_model_per_sequence) {
  const int64_t sequences = s.train.grad_accum_steps * s.train.per_device_batch_size;
  const int64_t m = s.parallel.pp_microbatches > 0 ? s.parallel.pp_microbatches : s.train.grad_accum_steps;
  const auto stages = split_stages(s.model, g.pp());
  std::printf("\npipeline: %lld micro-batches of %lld sequences per step, schedule %s\n", static_cast<long long>(m),
              static_cast<long long>(sequences / m),
              s.parallel.pp_schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b");
  std::printf(
      "bubble (idle) fraction, both schedules: (pp - 1) / (micro-batches + pp - 1) = %.1f%%%s\n",
      100.0 * bubble_fraction(g.pp(), m),
      m < 4 * g.pp() ? "; more micro-batches (train.grad_accum_steps or parallel.pp_microbatches) shrink it" : "");
  std::printf("\n| stage | blocks | activations held at peak, 1f1b | gpipe |\n|---|---|---|---|\n");
  const double per_block = whole_model_per_sequence.activations * static_cast<double>(sequences / m) /
                           static_cast<double>(s.model.n_layer) / (1024.0 * 1024.0);
  for (int64_t st = 0; st < g.pp(); ++st) {
    const auto& L = stages[static_cast<size_t>(st)];
    const double one = per_block * static_cast<double>(L.last - L.first) / static_cast<double>(g.tp());
    const int64_t f1b = peak_micro_batches_held(PipelineSchedule::kOneFOneB, g.pp(), st, m);
    const int64_t gp = peak_micro_batches_held(PipelineSchedule::kGpipe, g.pp(), st, m);
    std::printf("| %lld | %lld-%lld | %lld micro-batches, %.0f MiB | %lld, %.0f MiB |\n", static_cast<long long>(st),
                static_cast<long long>(L.first), static_cast<long long>(L.last - 1), static_cast<long long>(f1b),
                one * static_cast<double>(f1b), static_cast<long long>(gp), one * static_cast<double>(gp));
  }
}

}  // namespace

int print_plan(const CommonArgs& a, int world_size) {
  Recipe recipe = load_recipe(a.recipe, a.overrides, recipe_rules());
  Settings s = recipe.settings;
  // The grid: for the world size asked for, else the one the recipe's degrees imply.
  const int world = world_size > 0 ? world_size : smallest_world(s.parallel);
  const Grid g(s.parallel, world);
  std::string batch_note;
  if (s.train.per_device_batch_size == 0) {
    // What the CPU finder would choose for one rank's share; on a GPU the run measures instead.
    const double budget = cpu_memory_budget_bytes(s);
    validate_batch_auto(s, RunWorld{g.dp(), world, std::to_string(world) + " processes", false, world > 1});
    find_batch_size_cpu(s, g, s.train.global_batch_size / g.dp(), budget).apply_to(s.train);
    batch_note = fmt::format(" (auto: the largest that fits {:.0f} MiB{} on CPU; a GPU run measures instead)",
                             budget / (1024.0 * 1024.0), g.dp() > 1 ? " per rank" : "");
  }
  // A preference pair is two rows (DPO's frozen reference copy: plan_memory counts it).
  const ObjectiveSpec objective = configured_objective(s.train);
  MemoryPlan p = plan_memory(s, s.train.per_device_batch_size * objective.rows_per_sample);
  const double tokens_per_step = static_cast<double>(s.tokens_per_step());
  std::printf("plan for %s\n", recipe.source.c_str());
  std::printf("parameters: %lld (%.2fM)\n", static_cast<long long>(p.parameters), p.parameters / 1e6);
  std::printf(
      "training FLOPs per token: %.3g (6 N + 12 n_layer seq_len d_model, N without the position embedding); per step: "
      "%.3g\n",
      p.flops_per_token, p.flops_per_token * tokens_per_step);
  std::printf("micro-batch %lld x seq_len %lld, grad_accum_steps %lld: %.0f tokens per step%s\n",
              static_cast<long long>(s.train.per_device_batch_size), static_cast<long long>(s.model.seq_len),
              static_cast<long long>(s.train.grad_accum_steps), tokens_per_step, batch_note.c_str());
  if (objective.rows_per_sample > 1)
    std::printf("train.objective %s: a micro-batch of %lld pairs is one forward of %lld rows\n",
                objective_name(objective.name).c_str(), static_cast<long long>(s.train.per_device_batch_size),
                static_cast<long long>(s.train.per_device_batch_size * objective.rows_per_sample));
  std::printf("\n%s", memory_plan_table(s, p).c_str());
  std::printf(
      "\nEstimates: real peaks add the framework's own memory and allocator slack (see docs/training.md, Memory).\n");
  if (world > 1) {
    std::printf("\n%s", grid_table(s, g).c_str());
    std::printf("\n%s", rank_memory_table(s, g).c_str());
    if (g.cp() > 1) {
      Settings whole = s;  // one rank holding whole sequences, for comparison
      whole.parallel.cp = 1;
      const MemoryPlan alone = plan_memory(whole, s.train.per_device_batch_size);
      std::printf(
          "activations per rank under cp %d: %.1f MiB (one micro-batch, with the recipe's checkpointing); "
          "a rank holding whole sequences: %.1f MiB\n",
          g.cp(), p.activations / (1024.0 * 1024.0), alone.activations / (1024.0 * 1024.0));
    }
    if (s.parallel.zero > 0 && g.replicas() > 1)
      std::printf("one rank with micro-batch %lld (%s, activations, logits): %.1f MiB\n",
                  static_cast<long long>(s.train.per_device_batch_size),
                  s.parallel.zero == 3 ? (s.model.quantize.enabled()
                                              ? "its shards, three units' whole tensors, a Linear dequantized twice"
                                              : "its shards, three units' whole tensors")
                                       : "whole weights and gradients, the largest share of the optimizer state",
                  rank_step_bytes(s, g, s.train.per_device_batch_size) / (1024.0 * 1024.0));
    if (s.parallel.zero == 3 && s.parallel.offload_params && g.replicas() > 1)
      std::printf(
          "of which on the GPU (parallel.offload_params: the shards, their gradients and the optimizer state "
          "in host memory): %.1f MiB\n",
          rank_device_bytes_offloaded(s, g, s.train.per_device_batch_size) / (1024.0 * 1024.0));
    if (g.pp() > 1) print_pipeline(s, g, plan_memory(s, 1));
  }
  return 0;
}

void add_plan(CLI::App& cli, Commands& commands) {
  struct PlanArgs {
    CommonArgs common;
    int world_size = 0;
  };
  auto p = std::make_shared<PlanArgs>();
  auto* cmd = cli.add_subcommand("plan",
                                 "parameters, FLOPs per token, estimated memory per component, and "
                                 "the dp x pp x tp grid: which rank holds which layers and shards");
  add_recipe_args(cmd, p->common, false);
  cmd->add_option("--world-size", p->world_size, "processes to plan the grid for (default: the recipe's degrees)")
      ->check(CLI::Range(1, 1 << 20));
  commands.push_back({cmd, [p] { return print_plan(p->common, p->world_size); }});
}

}  // namespace gputrain::app
