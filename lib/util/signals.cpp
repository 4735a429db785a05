#include "util/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <utility>

namespace gputrain {
namespace {

std::atomic<int> g_signal{0};

const std::vector<std::pair<std::string, int>>& signal_table() {
  static const std::vector<std::pair<std::string, int>> t = {{"SIGTERM", SIGTERM}, {"SIGUSR1", SIGUSR1},
                                                             {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP},
                                                             {"SIGXCPU", SIGXCPU}, {"SIGQUIT", SIGQUIT}};
  return t;
}

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) _exit(128 + sig);  // second signal: stop now
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
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
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
