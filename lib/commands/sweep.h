// `gputrain sweep`: a hyperparameter search made of ordinary runs. Each trial is `gputrain run
// RECIPE --set ...` in its own folder under the sweep's; the trials are a grid (every combination of
// --grid lists) or --random N draws (--range intervals, --grid lists picked from); --parallel K runs
// K at once, sharing the cores (run.threads) or the GPUs (run.device). An interrupted sweep continues
// where it stopped: finished trials are not rerun, a stopped one resumes from its checkpoint. The end
// is a table ranked by eval loss (results.md, results.json) and a report of every trial.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gputrain {

struct SweepOptions {
  std::string recipe;               // empty = the built-in quickstart
  std::vector<std::string> sets;    // --set overrides every trial shares
  std::vector<std::string> grid;    // KEY=[v1, v2, ...]
  std::vector<std::string> ranges;  // KEY=LO:HI[:log|:int]
  int64_t random = 0;               // 0 = the full grid; N = N random trials
  uint64_t seed = 0;                // random trials' draws
  int64_t parallel = 1;             // trials at once
  std::string out;                  // the sweep's folder; empty = sweeps/<run.name>
  std::string executable;           // the gputrain binary that runs each trial
};

// One trial: its folder name and its --set overrides (the sweep's own, then its values).
struct SweepTrial {
  std::string name;
  std::vector<std::pair<std::string, std::string>> values;  // key, YAML value
};

// The trials the options describe; a usage Error for a malformed --grid or --range.
std::vector<SweepTrial> plan_sweep(const SweepOptions& o);

// Runs the sweep; returns the exit code (0 when every trial finished, 1 when one failed, 130/143
// when stopped by a signal). Throws usage or config Errors before starting anything.
int run_sweep(const SweepOptions& o);

}  // namespace gputrain
