#include <cstdio>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "model/kernel_bench.h"

namespace gputrain::app {

namespace {

struct KernelsBenchArgs {
  CommonArgs common;
  int64_t repeats = 50;
};

int kernels_bench(const KernelsBenchArgs& b) {
  Recipe recipe = load_recipe(b.common.recipe, b.common.overrides, recipe_rules());
  KernelBenchResult r = bench_kernels(recipe.settings, b.repeats);
  std::printf(
      "fused kernels vs the ATen ops they replace, forward + backward, at the shapes of %s on %s, mean of %lld\n\n",
      recipe.source.c_str(), r.device.c_str(), static_cast<long long>(b.repeats));
  std::printf("%s", kernel_bench_table(r).c_str());
  return 0;
}

}  // namespace

void add_kernels(CLI::App& cli, Commands& commands) {
  auto* kernels = cli.add_subcommand("kernels", "measure the fused CUDA kernels");
  kernels->require_subcommand(1);
  auto b = std::make_shared<KernelsBenchArgs>();
  auto* cmd = kernels->add_subcommand(
      "bench",
      "time each fused CUDA kernel against the ATen ops it replaces, forward + backward, at the recipe's shapes");
  add_recipe_args(cmd, b->common, false);
  cmd->add_option("--repeats", b->repeats, "timed repetitions per op (after one warm-up)")
      ->capture_default_str()
      ->check(kCount);
  commands.push_back({cmd, [b] { return kernels_bench(*b); }});
}

}  // namespace gputrain::app
