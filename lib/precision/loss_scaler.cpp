#include "precision/loss_scaler.h"

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace gputrain {

LossScaler::LossScaler(const PrecisionSettings& p, torch::Device device)
    : dynamic_(p.loss_scale == 0), growth_(p.growth_factor), backoff_(p.backoff_factor), interval_(p.growth_interval) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({1}, dynamic_ ? p.init_scale : p.loss_scale, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt));
  found_inf_ = torch::zeros({1}, f32);
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  const auto inv_scale = scale_.reciprocal();
  // The AMP kernel wants the gradients of one call on one device and dtype.
  std::map<std::string, std::vector<at::Tensor>> by_kind;
  for (const auto& p : params)
    if (p.grad().defined())
      by_kind[p.grad().device().str() + "/" + c10::toString(p.grad().scalar_type())].push_back(p.grad());
  for (auto& [_, grads] : by_kind) {
    if (grads.front().device() == found_inf_.device()) {
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
      continue;
    }
    // Gradients elsewhere (ZeRO-3's offloaded shards on the host) are checked there.
    torch::Tensor found_there = torch::zeros({1}, found_inf_.options().device(grads.front().device()));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_there, inv_scale.to(found_there.device()));
    found_inf_.add_(found_there.to(found_inf_.device()));
  }
  const bool found = found_inf_.item<float>() > 0;
  if (found) ++skipped_;
  return found;
}

void LossScaler::update(bool found_inf) {
  if (!dynamic_) return;
  found_inf_.fill_(found_inf ? 1.0 : 0.0);
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, growth_, backoff_, interval_);
}

LossScalerState LossScaler::state() const { return {scale_.item<double>(), growth_tracker_.item<int64_t>(), skipped_}; }

void LossScaler::load_state(const LossScalerState& s) {
  scale_.fill_(s.scale);
  growth_tracker_.fill_(s.growth_tracker);
  skipped_ = s.skipped_steps;
}

}  // namespace gputrain
