#include <spdlog/spdlog.h>

#include <csignal>

#include "commands.h"
#include "config/recipe.h"
#include "train/trainer.h"

namespace gputrain::app {

int cmd_run(const CommonArgs& a, const std::string& output_dir, bool overwrite) {
  std::vector<std::string> overrides = a.overrides;
  if (!output_dir.empty()) overrides.push_back("run.output_dir=" + output_dir);
  Recipe recipe = load_recipe(a.recipe, overrides);
  RunOutcome out = run_training(recipe, RunOptions{.overwrite = overwrite});
  if (out.status == "ok") return 0;
  return 128 + (out.signal != 0 ? out.signal : SIGINT);  // 130 after SIGINT, 143 after SIGTERM
}

}  // namespace gputrain::app
