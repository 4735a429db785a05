#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "checkpoint/checkpoint_dir.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "parallel/launcher.h"
#include "train/trainer.h"
#include "util/error.h"

namespace gputrain::app {

namespace {

struct RunArgs {
  CommonArgs common;
  std::string output_dir;
  bool overwrite = false;
  bool dry_run = false;
  int max_restarts = 0;
  LaunchArgs launch;
};

// The overrides with --output-dir as run.output_dir: single-quoted YAML, so that any path (with ':',
// '#', '[' ...) stays a plain string.
std::vector<std::string> with_output_dir(std::vector<std::string> overrides, const std::string& dir) {
  if (dir.empty()) return overrides;
  std::string quoted = "'";
  for (char c : dir) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  overrides.push_back("run.output_dir=" + quoted + "'");
  return overrides;
}

// A worker's command: this program's `run` with the same recipe and overrides (no launcher flags).
std::vector<std::string> worker_args(const RunArgs& r, bool overwrite, const std::vector<std::string>& more_sets) {
  std::vector<std::string> args = {"run"};
  if (!r.common.recipe.empty()) args.push_back(r.common.recipe);
  for (const auto& s : r.common.overrides) args.insert(args.end(), {"--set", s});
  for (const auto& s : more_sets) args.insert(args.end(), {"--set", s});
  if (!r.output_dir.empty()) args.insert(args.end(), {"--output-dir", r.output_dir});
  if (overwrite) args.push_back("--overwrite");
  return args;
}

// Starts the workers, with the torchrun variables set; after a worker fails, all of them again, at
// most --max-restarts times (torchrun's meaning).
int launch(const RunArgs& r) {
  LaunchOptions o = launch_options(r.launch);
  if (r.max_restarts > 0 && o.nnodes > 1)
    throw usage_error("--max-restarts restarts the workers of one node; with --nnodes " + std::to_string(o.nnodes) +
                      " the other nodes would not restart with them\n    fix: drop --max-restarts and let the "
                      "scheduler requeue the job (e.g. sbatch --requeue): a run continues from its newest checkpoint");
  // A bad recipe fails once, here, not in every worker.
  const Recipe recipe = load_recipe(r.common.recipe, with_output_dir(r.common.overrides, r.output_dir), recipe_rules());
  o.worker_args = worker_args(r, r.overwrite, {});
  for (int restarts = 0;; ++restarts) {
    const int code = launch_workers(o);
    const bool stopped = code == 0 || code == 128 + SIGTERM || code == 128 + SIGINT;  // done, or asked to stop
    if (stopped || restarts == r.max_restarts) return code;
    // From the newest complete checkpoint in checkpoint.dir (resume: auto, without --overwrite, which would
    // delete it); with none yet, the first command again, replacing what the failed attempt wrote.
    const bool saved = !list_checkpoints(recipe.settings.resolved_checkpoint_dir()).complete.empty();
    o.worker_args = saved ? worker_args(r, false, {"checkpoint.resume=auto"}) : worker_args(r, true, {});
    std::fprintf(stderr, "gputrain launcher: restart %d of %d: starting the workers again (%s)\n", restarts + 1,
                 r.max_restarts, saved ? "from the newest checkpoint" : "no checkpoint yet: from the start");
  }
}

int run(const RunArgs& r) {
  const LaunchArgs& l = r.launch;
  if (r.dry_run) return print_plan(r.common, l.launching() ? l.nproc_per_node * std::max(l.nnodes, 1) : 0);
  if (l.launching() || r.max_restarts > 0) return launch(r);
  Recipe recipe = load_recipe(r.common.recipe, with_output_dir(r.common.overrides, r.output_dir), recipe_rules());
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
  cmd->add_option("--max-restarts", r->max_restarts,
                  "when a worker fails, stop all and start them again from the newest checkpoint, at most N "
                  "times (one node; through the launcher, also with one worker)")
      ->check(CLI::Range(0, 1000000));
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
