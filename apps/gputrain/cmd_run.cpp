#include <spdlog/spdlog.h>

#include <csignal>

#include "commands.h"
#include "config/recipe.h"
#include "train/trainer.h"

namespace gputrain::app {

int cmd_run(const CommonArgs& a, const std::string& output_dir, bool overwrite, bool dry_run) {
  if (dry_run) return cmd_plan(a);
  std::vector<std::string> overrides = a.overrides;
  if (!output_dir.empty()) {
    // Single-quoted YAML, so that any path (with ':', '#', '[' ...) stays a plain string.
    std::string quoted = "'";
    for (char c : output_dir) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    overrides.push_back("run.output_dir=" + quoted + "'");
  }
  Recipe recipe = load_recipe(a.recipe, overrides);
  RunOutcome out = run_training(recipe, RunOptions{.overwrite = overwrite});
  if (out.status == "ok") return 0;
  // 143 (128 + SIGTERM) means "preempted, resume me", whichever signal (or
  // checkpoint.max_wall_time) stopped the run; 130 means SIGINT.
  return out.status == "preempted" ? 128 + SIGTERM : 128 + SIGINT;
}

}  // namespace gputrain::app
