#include <cstdio>

#include "commands.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/kernel_bench.h"

namespace gputrain::app {

int cmd_kernels_bench(const CommonArgs& a, int64_t repeats) {
  Recipe recipe = load_recipe(a.recipe, a.overrides, architecture_rules());
  KernelBenchResult r = bench_kernels(recipe.settings, repeats);
  std::printf(
      "fused kernels vs the ATen ops they replace, forward + backward, at the shapes of %s on %s, mean of %lld\n\n",
      recipe.source.c_str(), r.device.c_str(), static_cast<long long>(repeats));
  std::printf("%s", kernel_bench_table(r).c_str());
  return 0;
}

}  // namespace gputrain::app
