// One function per subcommand; each parses nothing itself (main.cpp owns the
// CLI11 setup) and calls into the library. They return the exit code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "parallel/launcher.h"
#include "train/evaluate_dataset.h"
#include "train/generate.h"
#include "train/sweep.h"

namespace gputrain::app {

struct CommonArgs {
  std::string recipe;  // empty = the built-in quickstart
  std::vector<std::string> overrides;
};

// `run`'s launcher flags (parallel/launcher.h); 0/empty = not given.
struct LaunchArgs {
  int nproc_per_node = 0;
  int nnodes = 0;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool launching() const { return nproc_per_node > 0 || nnodes > 0; }
};

// The launcher's options from `run`'s or `eval`'s flags; the caller adds the workers' arguments.
LaunchOptions launch_options(const LaunchArgs& l);

int cmd_run(const CommonArgs& a, const std::string& output_dir, bool overwrite, bool dry_run, const LaunchArgs& launch);
int cmd_validate(const CommonArgs& a);
int cmd_print_config(const CommonArgs& a, const std::string& format, bool reference, bool json_schema);
// world_size 0 = the recipe's own degrees (parallel.dp x tp x pp, dp auto counting as 1).
int cmd_plan(const CommonArgs& a, int world_size);
int cmd_data_prepare(const PrepareOptions& o);
int cmd_data_bench(const CommonArgs& a, const std::vector<int64_t>& workers, int64_t batches);
int cmd_optim_bench(const CommonArgs& a, int64_t steps);
int cmd_kernels_bench(const CommonArgs& a, int64_t repeats);
int cmd_export(const std::string& checkpoint, const std::string& format, const std::string& out, bool overwrite,
               bool merge_lora, const std::string& max_shard_size, const std::string& dtype);

// spdlog's messages to stderr, for commands whose stdout is their result (generate, eval).
void messages_to_stderr();
int cmd_generate(GenerateOptions o);
int cmd_eval(const EvalCommandOptions& o, const LaunchArgs& launch);
int cmd_sweep(SweepOptions o);
int cmd_report(const std::vector<std::string>& run_dirs, const std::string& out);

}  // namespace gputrain::app
