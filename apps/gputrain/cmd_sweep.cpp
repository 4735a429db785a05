#include <filesystem>
#include <memory>

#include "commands.h"
#include "commands/sweep.h"

namespace gputrain::app {

namespace {

int sweep(SweepOptions o) {
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  return run_sweep(o);
}

}  // namespace

void add_sweep(CLI::App& cli, Commands& commands) {
  auto o = std::make_shared<SweepOptions>();
  auto* cmd = cli.add_subcommand("sweep", "a hyperparameter search: a run per trial, a ranked table and a report");
  cmd->add_option("recipe", o->recipe, "recipe YAML file (default: the built-in quickstart)");
  cmd->add_option("--set", o->sets, "override a key in every trial (repeatable)")->type_name("KEY=VALUE");
  cmd->add_option("--grid", o->grid, "a key's values, e.g. --grid optim.lr=[1e-3,3e-3] (repeatable: every combination)")
      ->type_name("KEY=[V,...]");
  cmd->add_option("--random", o->random, "N random trials instead of the grid: --range draws, --grid lists picked from")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  cmd->add_option("--range", o->ranges, "with --random: KEY=LO:HI (uniform), LO:HI:log (log-uniform) or LO:HI:int")
      ->type_name("KEY=LO:HI[:log|:int]");
  cmd->add_option("--seed", o->seed, "the random trials' draws")->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "trials at once, sharing the cores (run.threads) or the GPUs")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--out", o->out, "the sweep's folder (default: sweeps/<run.name>); rerun to continue it");
  commands.push_back({cmd, [o] { return sweep(*o); }});
}

}  // namespace gputrain::app
