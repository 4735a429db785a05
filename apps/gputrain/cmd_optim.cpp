#include <cstdio>

#include "commands.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "optim/optim_bench.h"

namespace gputrain::app {

int cmd_optim_bench(const CommonArgs& a, int64_t steps) {
  Recipe recipe = load_recipe(a.recipe, a.overrides, architecture_rules());
  const Settings& s = recipe.settings;
  OptimBenchResult r = bench_optimizers(s, steps);
  std::printf("optimizer step of %s: %.1fM parameters (%s weights) on %s, %lld threads, mean of %lld steps\n\n",
              recipe.source.c_str(), static_cast<double>(r.parameters) / 1e6,
              s.precision.mode == PrecisionMode::kBf16Pure ? "bf16" : "fp32", r.device.c_str(),
              static_cast<long long>(r.threads), static_cast<long long>(steps));
  std::printf("%s", optim_bench_table(r).c_str());
  return 0;
}

}  // namespace gputrain::app
