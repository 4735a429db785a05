// metrics.profile_at / profile_steps: records a window of training steps with
// the PyTorch profiler (Kineto: CPU ops, and on CUDA every kernel and copy)
// and writes <output_dir>/profile/trace.json (Chrome trace format: Perfetto or
// chrome://tracing) and ops.md, a table of where the time went: device time
// per kernel on CUDA, self time per op on CPU, and on CUDA how much of the
// steps' wall time the device was busy (launch or sync bound when far below
// 100%).
#pragma once
#include <torch/types.h>

#include <chrono>
#include <filesystem>
#include <memory>

namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace gputrain {

class StepProfiler {
 public:
  // Profiles steps [first_step, first_step + steps) (1-based, as in metrics.jsonl); first_step 0 = never.
  StepProfiler(int64_t first_step, int64_t steps, torch::Device device, std::filesystem::path dir);
  ~StepProfiler();  // stops a profile still running (a run that failed mid-window) without writing it
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void before_step(int64_t step);  // `step` is about to run
  void after_step(int64_t step);   // `step` has run; the last one of the window writes the files

 private:
  int64_t first_, last_;
  torch::Device device_;
  std::filesystem::path dir_;
  bool active_ = false;
  std::chrono::steady_clock::time_point start_;
};

// The ops.md table from a finished profile (exposed for tests): device events
// on CUDA, CPU ops by self time otherwise; `wall_ms` is the window's wall time.
std::string profile_table(const torch::autograd::profiler::ProfilerResult& result, bool device_events, int64_t steps,
                          double wall_ms);

}  // namespace gputrain
