#include <algorithm>
#include <csignal>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "optim/optimizer_specs.h"
#include "parallel/launcher.h"
#include "train/trainer.h"

namespace gputrain::app {

namespace {

struct RunArgs {
  CommonArgs common;
  std::string output_dir;
  bool overwrite = false;
  bool dry_run = false;
  LaunchArgs launch;
};

// Starts the workers: each runs this program's `run` with the same recipe and
// overrides (and no launcher flags), with the torchrun variables set.
int launch(const RunArgs& r) {
  LaunchOptions o = launch_options(r.launch);
  const CommonArgs& a = r.common;
  load_recipe(a.recipe, a.overrides, recipe_rules());  // a bad recipe fails once, here, not in every worker
  o.worker_args = {"run"};
  if (!a.recipe.empty()) o.worker_args.push_back(a.recipe);
  for (const auto& s : a.overrides) o.worker_args.insert(o.worker_args.end(), {"--set", s});
  if (!r.output_dir.empty()) o.worker_args.insert(o.worker_args.end(), {"--output-dir", r.output_dir});
  if (r.overwrite) o.worker_args.push_back("--overwrite");
  return launch_workers(o);
}

int run(const RunArgs& r) {
  const LaunchArgs& l = r.launch;
  if (r.dry_run) return print_plan(r.common, l.launching() ? l.nproc_per_node * std::max(l.nnodes, 1) : 0);
  if (l.launching()) return launch(r);
  std::vector<std::string> overrides = r.common.overrides;
  if (!r.output_dir.empty()) {
    // Single-quoted YAML, so that any path (with ':', '#', '[' ...) stays a plain string.
    std::string quoted = "'";
    for (char c : r.output_dir) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    overrides.push_back("run.output_dir=" + quoted + "'");
  }
  Recipe recipe = load_recipe(r.common.recipe, overrides, recipe_rules());
  RunOutcome out = run_training(recipe, RunOptions{.overwrite = r.overwrite});
  if (out.status == "ok") return 0;
  // 143 (128 + SIGTERM) means "preempted, resume me", whichever signal (or
  // checkpoint.max_wall_time) stopped the run; 130 means SIGINT.
  return out.status == "preempted" ? 128 + SIGTERM : 128 + SIGINT;
}

}  // namespace

void add_run(CLI::App& cli, Commands& commands) {
  auto r = std::make_shared<RunArgs>();
  auto* cmd = cli.add_subcommand("run", "train a model from a recipe");
  add_recipe_args(cmd, r->common, false);
  cmd->add_option("--output-dir", r->output_dir, "where metrics go (same as --set run.output_dir=DIR)");
  cmd->add_flag("--overwrite", r->overwrite, "replace an earlier run's metrics in the output directory");
  cmd->add_flag("--dry-run", r->dry_run,
                "print the plan (parameters, FLOPs, memory per component) and exit; same as `plan`");
  LaunchArgs& l = r->launch;
  cmd->add_option("--nproc-per-node", l.nproc_per_node, "start this many workers here (one per GPU on CUDA)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--nnodes", l.nnodes, "machines in the run (start gputrain on each with its --node-rank)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--node-rank", l.node_rank, "this machine's index, 0 to nnodes-1")->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", l.master_addr, "host of node 0, where rank 0 listens for the rendezvous");
  cmd->add_option("--master-port", l.master_port, "rendezvous port; default: a free one (one node) or 29500")
      ->check(CLI::Range(1, 65535));
  commands.push_back({cmd, [r] { return run(*r); }});
}

}  // namespace gputrain::app
