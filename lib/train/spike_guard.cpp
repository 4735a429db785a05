#include "train/spike_guard.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include <fmt/format.h>

#include "report/run_summary.h"
#include "util/error.h"
#include "util/ignore_index.h"

namespace gputrain {
namespace {

// How far above the mean of `window` x lies, in (floored) standard deviations.
double z_above(const std::deque<double>& window, double x) {
  const double n = static_cast<double>(window.size());
  const double mean = std::accumulate(window.begin(), window.end(), 0.0) / n;
  double var = 0;
  for (double v : window) var += (v - mean) * (v - mean);
  const double sd = std::max(std::sqrt(var / n), 0.01 * std::abs(mean) + 1e-12);
  return (x - mean) / sd;
}

}  // namespace

SpikeVerdict SpikeGuard::judge(double loss, double grad_norm) {
  SpikeVerdict v;
  if (static_cast<int64_t>(losses_.size()) >= window_) {
    v.loss_z = z_above(losses_, loss);
    v.grad_norm_z = z_above(grad_norms_, grad_norm);
    v.spike = v.loss_z > threshold_ || v.grad_norm_z > threshold_;
  }
  if (v.spike) return v;
  losses_.push_back(loss);
  grad_norms_.push_back(grad_norm);
  if (static_cast<int64_t>(losses_.size()) > window_) {
    losses_.pop_front();
    grad_norms_.pop_front();
  }
  return v;
}

std::set<int64_t> poisoned_steps_from_environment() {
  std::set<int64_t> steps;
  const char* env = std::getenv("GPUTRAIN_POISON_STEPS");
  if (env == nullptr) return steps;
  std::stringstream in(env);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long step = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || step < 1)
      throw usage_error("GPUTRAIN_POISON_STEPS='" + std::string(env) + "' is not a list of steps\n    fix: e.g. 25,40");
    steps.insert(step);
  }
  return steps;
}

void poison_batch(Batch& b, int64_t vocab, int64_t step) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(step));
  const torch::Tensor noise = at::randint(0, vocab, b.target.sizes(), g, at::kLong).to(b.target.device());
  b.target = at::where(b.target == kIgnoreIndex, b.target, noise);
}

nlohmann::ordered_json spike_event(int64_t step, double loss, double grad_norm, const SpikeVerdict& v) {
  return {{"step", step},
          {"loss", round_to(loss, 6)},
          {"loss_z", round_to(v.loss_z, 2)},
          {"grad_norm", round_to(grad_norm, 6)},
          {"grad_norm_z", round_to(v.grad_norm_z, 2)}};
}

std::string spike_warning(int64_t step, double loss, double grad_norm, const SpikeVerdict& v, int64_t window,
                          const std::string& action) {
  return fmt::format(
      "step {}: loss spike: loss {:.4f} ({:.1f} deviations above the last {} steps' mean), gradient norm {:.4f} "
      "({:.1f}): {}",
      step, loss, v.loss_z, window, grad_norm, v.grad_norm_z, action);
}

std::string too_many_rollbacks_message(int64_t step, double loss, const SpikeVerdict& v, int64_t rollbacks) {
  return fmt::format(
      "step {}: a loss spike (loss {:.4f}, {:.1f} deviations above the mean) after {} rollbacks "
      "(train.spike_max_rollbacks)\n    fix: lower optim.lr, raise optim.schedule.warmup_steps, check the data near "
      "this point, or raise train.spike_max_rollbacks",
      step, loss, v.loss_z, rollbacks);
}

nlohmann::ordered_json spike_report(const TrainSettings& t, int64_t skipped_steps, int64_t rollbacks,
                                    const nlohmann::ordered_json& events) {
  return {{"policy", t.spike_policy == SpikePolicy::kSkip ? "skip" : "rollback"},
          {"window", t.spike_window},
          {"threshold", t.spike_threshold},
          {"skipped_steps", skipped_steps},
          {"rollbacks", rollbacks},
          {"events", events}};
}

}  // namespace gputrain
