#include <cstdio>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "optim/optim_bench.h"

namespace gputrain::app {

namespace {

struct OptimBenchArgs {
  CommonArgs common;
  int64_t steps = 5;
};

int optim_bench(const OptimBenchArgs& b) {
  Recipe recipe = load_recipe(b.common.recipe, b.common.overrides, recipe_rules());
  const Settings& s = recipe.settings;
  OptimBenchResult r = bench_optimizers(s, b.steps);
  std::printf("optimizer step of %s: %.1fM parameters (%s weights) on %s, %lld threads, mean of %lld steps\n\n",
              recipe.source.c_str(), static_cast<double>(r.parameters) / 1e6,
              s.precision.mode == PrecisionMode::kBf16Pure ? "bf16" : "fp32", r.device.c_str(),
              static_cast<long long>(r.threads), static_cast<long long>(b.steps));
  std::printf("%s", optim_bench_table(r).c_str());
  return 0;
}

}  // namespace

void add_optim(CLI::App& cli, Commands& commands) {
  auto* optim = cli.add_subcommand("optim", "list and measure the optimizers");
  optim->require_subcommand(1);
  auto b = std::make_shared<OptimBenchArgs>();
  auto* cmd = optim->add_subcommand(
      "bench",
      "time one optimizer step of every optimizer on the recipe's model and device, with state bytes per parameter");
  add_recipe_args(cmd, b->common, false);
  cmd->add_option("--steps", b->steps, "timed steps per optimizer (after one warm-up step)")
      ->capture_default_str()
      ->check(kCount);
  commands.push_back({cmd, [b] { return optim_bench(*b); }});
  auto* list = optim->add_subcommand(
      "list",
      "print the optimizers optim.name can name: state per parameter, kernels, keys (docs/training.md's table)");
  commands.push_back({list, [] {
                        std::printf("%s", optimizer_table_markdown().c_str());
                        return 0;
                      }});
}

}  // namespace gputrain::app
