#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "commands.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "parallel/launcher.h"
#include "train/trainer.h"
#include "util/error.h"

namespace gputrain::app {

LaunchOptions launch_options(const LaunchArgs& l) {
  if (std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK"))
    throw usage_error(
        "--nproc-per-node inside a process that a launcher started already (RANK or "
        "OMPI_COMM_WORLD_RANK is set)\n    fix: drop --nproc-per-node, or unset those variables");
  LaunchOptions o;
  o.nproc_per_node = std::max(1, l.nproc_per_node);
  o.nnodes = std::max(1, l.nnodes);
  o.node_rank = l.node_rank;
  // One node rendezvouses on loopback (a MASTER_ADDR left in the environment may name another host).
  if (!l.master_addr.empty()) o.master_addr = l.master_addr;
  else if (const char* env = std::getenv("MASTER_ADDR"); env && o.nnodes > 1) o.master_addr = env;
  else if (o.nnodes > 1)
    throw usage_error("--nnodes " + std::to_string(o.nnodes) + " needs --master-addr (node 0's host)");
  o.master_port = l.master_port;
  if (o.master_port == 0)
    if (const char* env = std::getenv("MASTER_PORT")) o.master_port = std::atoi(env);
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  return o;
}

namespace {

// Starts the workers: each runs this program's `run` with the same recipe and
// overrides (and no launcher flags), with the torchrun variables set.
int launch(const CommonArgs& a, const std::string& output_dir, bool overwrite, const LaunchArgs& l) {
  LaunchOptions o = launch_options(l);
  load_recipe(a.recipe, a.overrides, architecture_rules());  // a bad recipe fails once, here, not in every worker
  o.worker_args = {"run"};
  if (!a.recipe.empty()) o.worker_args.push_back(a.recipe);
  for (const auto& s : a.overrides) o.worker_args.insert(o.worker_args.end(), {"--set", s});
  if (!output_dir.empty()) o.worker_args.insert(o.worker_args.end(), {"--output-dir", output_dir});
  if (overwrite) o.worker_args.push_back("--overwrite");
  return launch_workers(o);
}

}  // namespace

int cmd_run(const CommonArgs& a, const std::string& output_dir, bool overwrite, bool dry_run, const LaunchArgs& l) {
  if (dry_run) return cmd_plan(a, l.launching() ? l.nproc_per_node * std::max(l.nnodes, 1) : 0);
  if (l.launching()) return launch(a, output_dir, overwrite, l);
  std::vector<std::string> overrides = a.overrides;
  if (!output_dir.empty()) {
    // Single-quoted YAML, so that any path (with ':', '#', '[' ...) stays a plain string.
    std::string quoted = "'";
    for (char c : output_dir) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    overrides.push_back("run.output_dir=" + quoted + "'");
  }
  Recipe recipe = load_recipe(a.recipe, overrides, architecture_rules());
  RunOutcome out = run_training(recipe, RunOptions{.overwrite = overwrite});
  if (out.status == "ok") return 0;
  // 143 (128 + SIGTERM) means "preempted, resume me", whichever signal (or
  // checkpoint.max_wall_time) stopped the run; 130 means SIGINT.
  return out.status == "preempted" ? 128 + SIGTERM : 128 + SIGINT;
}

}  // namespace gputrain::app
