#include "util/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <utility>

namespace gputrain {
namespace {

std::atomic<int> g_signal{0};
pid_t g_parent = 0;  // the parent when the handlers were installed (a launcher, a shell)

const std::vector<std::pair<std::string, int>>& signal_table() {
  static const std::vector<std::pair<std::string, int>> t = {{"SIGTERM", SIGTERM}, {"SIGUSR1", SIGUSR1},
                                                             {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP},
                                                             {"SIGXCPU", SIGXCPU}, {"SIGQUIT", SIGQUIT}};
  return t;
}

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) {
    // A dead parent's death signal (PR_SET_PDEATHSIG, parallel/launcher.cpp) comes once per thread
    // of the parent as each exits, after we were handed to another: those repeats are not a second signal.
    if (info != nullptr && info->si_code == SI_USER && info->si_pid == g_parent && getppid() != g_parent) return;
    _exit(128 + sig);  // second signal: stop now
  }
  static const char msg[] = "\ngputrain: stopping after this step (signal again to exit now)\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

const std::vector<std::string>& catchable_signal_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, _] : signal_table()) v.push_back(name);
    return v;
  }();
  return names;
}

int signal_number(const std::string& name) {
  for (const auto& [n, number] : signal_table())
    if (n == name) return number;
  return 0;
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  for (const auto& [n, number] : signal_table())
    if (number == sig) return n;
  return "signal " + std::to_string(sig);
}

StopSignals::StopSignals(const std::vector<std::string>& preempt) {
  g_signal = 0;
  g_parent = getppid();
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  std::vector<int> sigs = {SIGINT};
  for (const auto& name : preempt)
    if (int n = signal_number(name); n != 0) sigs.push_back(n);
  for (int sig : sigs) {
    struct sigaction old {};
    sigaction(sig, &sa, &old);
    saved_.push_back({sig, old});
  }
}

StopSignals::~StopSignals() {
  for (const auto& [sig, old] : saved_) sigaction(sig, &old, nullptr);
}

int StopSignals::requested() { return g_signal.load(); }

}  // namespace gputrain
