// Graceful stop on SIGINT/SIGTERM: the first signal asks the loop to finish
// the current step and write its summary; a second one exits at once.
#pragma once

namespace gputrain {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0 while no stop was asked for, else the signal number.
  static int requested();
};

}  // namespace gputrain
