#include "util/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace gputrain {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term;

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) _exit(128 + sig);  // second signal: stop now
  static const char msg[] = "\ngputrain: stopping after this step (signal again to exit now)\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::requested() { return g_signal.load(); }

}  // namespace gputrain
