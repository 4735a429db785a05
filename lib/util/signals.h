// Graceful stops. SIGINT (Ctrl-C) interrupts; the preemption signals
// (checkpoint.preempt_signals, SIGTERM and SIGUSR1 by default: what SLURM,
// Kubernetes and batch schedulers send before killing a job) preempt. Either
// asks the loop to finish the current step, save a checkpoint and write its
// summary; a second signal of any of them exits at once (a dead launcher's death notice,
// repeated by the kernel for each of its threads, counts once).
#pragma once
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

namespace gputrain {

// The signal names a recipe may list in checkpoint.preempt_signals
// ("SIGTERM", "SIGUSR1", ...), and the number of one (0 when not listed).
const std::vector<std::string>& catchable_signal_names();
int signal_number(const std::string& name);
std::string signal_name(int sig);  // "SIGINT", "SIGTERM", ... or "signal N"

class StopSignals {
 public:
  // Installs the handlers for SIGINT and `preempt` (names from catchable_signal_names()).
  explicit StopSignals(const std::vector<std::string>& preempt = {"SIGTERM"});
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0 while no stop was asked for, else the signal number.
  static int requested();
  // Whether the signal that arrived is a preemption (not SIGINT).
  static bool preempted() { return requested() != 0 && requested() != SIGINT; }

 private:
  std::vector<std::pair<int, struct sigaction>> saved_;  // the handlers to restore
};

}  // namespace gputrain
