#include "train/spike_guard.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

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

}  // namespace gputrain
