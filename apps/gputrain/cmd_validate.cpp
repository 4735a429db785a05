#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "data/window_source.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"

namespace gputrain::app {

namespace {

int validate(const CommonArgs& a) {
  Recipe recipe = load_recipe(a.recipe, a.overrides, recipe_rules());  // throws with every problem listed
  check_data_sources(recipe.settings);                                 // opens the data files as `run` would
  for (const auto& w : recipe.warnings) std::fprintf(stderr, "warning: %s\n", w.str().c_str());
  std::printf("%s: ok (%zu file%s, %zu warning%s)\n", recipe.source.c_str(), recipe.files.size(),
              recipe.files.size() == 1 ? "" : "s", recipe.warnings.size(), recipe.warnings.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace

void add_validate(CLI::App& cli, Commands& commands) {
  auto a = std::make_shared<CommonArgs>();
  auto* cmd = cli.add_subcommand("validate", "check a recipe; exit 0, or 2 listing every problem");
  add_recipe_args(cmd, *a, true);
  commands.push_back({cmd, [a] { return validate(*a); }});
}

}  // namespace gputrain::app
