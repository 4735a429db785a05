#include "train/nan_guard.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "util/error.h"

namespace gputrain {

bool step_is_finite(const torch::Tensor& loss, const torch::Tensor& grad_norm) {
  return at::isfinite(loss.detach().to(at::kFloat) + grad_norm.to(loss.device(), at::kFloat)).item<bool>();
}

std::string first_non_finite(const std::vector<NamedTensor>& params) {
  auto bad_count = [](const torch::Tensor& t) { return (~at::isfinite(t)).sum().item<int64_t>(); };
  for (const auto& p : params)
    if (int64_t n = bad_count(p.tensor.detach()); n > 0)
      return fmt::format("parameter {} ({} of {} values inf/nan)", p.name, n, p.tensor.numel());
  for (const auto& p : params)
    if (p.tensor.grad().defined())
      if (int64_t n = bad_count(p.tensor.grad()); n > 0)
        return fmt::format("gradient of {} ({} of {} values inf/nan)", p.name, n, p.tensor.numel());
  return "";
}

// "nan" whatever its sign bit ({} prints "-nan" for some NaNs), else the value.
static std::string number(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

std::string non_finite_message(int64_t step, double loss, double grad_norm, const std::string& culprit,
                               NanPolicy policy) {
  std::string m =
      fmt::format("step {}: loss {}, gradient norm {}; first non-finite: {}", step, number(loss), number(grad_norm),
                  culprit.empty() ? "(none found in parameters or gradients: the loss itself)" : culprit);
  switch (policy) {
    case NanPolicy::kAbort:
      return m +
             "\n    fix: lower optim.lr, raise optim.schedule.warmup_steps, set train.max_grad_norm, or use "
             "precision.mode: bf16; train.nan_policy: skip drops such steps instead";
    case NanPolicy::kSkip:
      return m + "; update skipped (train.nan_policy: skip)";
    case NanPolicy::kWarn:
      return m + "; update applied anyway (train.nan_policy: warn)";
  }
  return m;
}

void SkipCounter::count(int64_t step, bool overflow, bool nan_skip, bool spike_skip, double loss_scale) {
  constexpr int64_t kMaxConsecutiveSkips = 50;
  if (overflow)
    spdlog::warn("step {}: gradients overflowed under fp16; optimizer step skipped, loss scale now {}", step,
                 loss_scale);
  if (!overflow && !nan_skip && !spike_skip) {
    consecutive_ = 0;
    return;
  }
  if (++consecutive_ >= kMaxConsecutiveSkips)
    throw runtime_error(std::to_string(consecutive_) + " steps in a row were skipped (" +
                        (overflow     ? "fp16 overflow, down to loss scale " + std::to_string(loss_scale)
                         : spike_skip ? std::string("loss spikes: the loss no longer fits train.spike_window's steps")
                                      : std::string("non-finite loss or gradients")) +
                        ")\n    fix: use precision.mode: bf16 (fp32's range), lower optim.lr, or check the "
                        "initial weights (model.init_from)");
}

}  // namespace gputrain
