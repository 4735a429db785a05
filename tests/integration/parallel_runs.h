// Helpers of the multi-process tests (parallel_cli_test.cpp, fully_sharded_cli_test.cpp): the
// shared recipe, runs through the launcher, and comparisons of their metrics with one process's.
#pragma once
#include <string>
#include <vector>

#include "run_comparison.h"
#include "test_util.h"

namespace gputrain::test {

// `gputrain run` of `recipe` into `out` with `sets` (--set), through the launcher when nproc > 0.
CommandResult train(const std::string& recipe, const std::string& out, int nproc, const std::vector<std::string>& sets);

// A multi-process run to compare with one process: its recipe overrides and process count.
struct Variant {
  const char* name;
  std::vector<std::string> sets;
  int nproc = 2;
};

// Trains `v` into dir/<name> and checks its per-step losses and gradient
// norms against the 1-process run's, within `tolerance`.
CommandResult train_like_one_process(const TempDir& dir, const std::string& recipe, const Variant& v,
                                     const std::vector<double>& loss1, const std::vector<double>& norm1,
                                     double tolerance);

// Starts the launcher in the background, its output in `log`; `flags` go to `run` as well.
int spawn_launcher(const std::string& recipe, const std::string& out, int nproc, const std::vector<std::string>& sets,
                   const std::string& log, const std::vector<std::string>& flags = {});

// The pid of the launcher's worker with RANK=`rank`, or -1.
int worker_pid(int launcher, int rank);

// A resumed run's `steps` losses are the uninterrupted run's last ones: bitwise
// with tolerance 0, else within it.
void check_continues(const std::vector<double>& straight, const std::vector<double>& resumed, size_t steps,
                     double tolerance);

// Trains `sets` (a resume) into `out` as `nproc` processes (0: one plain process), requires it to
// succeed and checks that its losses continue `straight`'s last `steps` (check_continues); returns it.
CommandResult train_resumed(const std::string& recipe, const std::string& out, int nproc,
                            const std::vector<std::string>& sets, const std::vector<double>& straight, size_t steps,
                            double tolerance);

// `sets` plus checkpoint.resume=`checkpoint`.
std::vector<std::string> with_resume(std::vector<std::string> sets, const std::string& checkpoint);

// Trains `sets` (2 processes, checkpoints on) straight, then again with rank `victim` SIGKILLed
// while a checkpoint is being written; the last checkpoint stays whole, and the resumed run ends
// with the uninterrupted run's model and optimizer files, byte for byte.
void check_kill_during_save(const TempDir& dir, const std::vector<std::string>& sets, int victim);

// Lines of out/metrics.jsonl so far.
size_t metric_lines(const std::string& out);

// Each of `pids`' peak resident memory so far, as the kernel counts it (VmHWM, MiB).
std::vector<double> peak_rss_mb(const std::vector<int>& pids);

// The kernel's count of each process's peak resident memory while it trained (MiB), for `sets` run as
// `nproc` processes into dir/<name> (recipe dir/r.yaml, log dir/<name>.log): the peak is reset
// (/proc/<pid>/clear_refs) as the process pauses before its first step (failpoint train.start), with
// its model built and sharded, and read (VmHWM) as it pauses after its last (train.done). With
// `built_mb`, not reset: the peak since the process started, and in *built_mb each one's peak up to
// its first step (building the model).
std::vector<double> training_peak_mb(const TempDir& dir, const std::string& name, int nproc,
                                     const std::vector<std::string>& sets, std::vector<double>* built_mb = nullptr);

}  // namespace gputrain::test
