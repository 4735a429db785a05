#include "model/rope_scaling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gputrain {
namespace {

torch::Tensor unscaled(int64_t head_dim, double theta) {
  auto i = at::arange(0, head_dim / 2, at::kDouble);
  return at::pow(theta, i * (-2.0 / static_cast<double>(head_dim)));
}

// Llama 3.1: long wavelengths are divided by factor, short ones kept, the band between blended.
torch::Tensor llama3(const torch::Tensor& inv, const RopeScalingSettings& s) {
  const double old_context = static_cast<double>(s.original_max_positions);
  const double low_wavelen = old_context / s.low_freq_factor, high_wavelen = old_context / s.high_freq_factor;
  auto wavelen = (2 * std::numbers::pi) / inv;
  auto scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
  auto smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
  return at::where(medium, smoothed, scaled);
}

// YaRN (Peng et al. 2023): interpolation for low frequencies, extrapolation for high ones, a
// linear ramp between the dimensions that rotate beta_slow and beta_fast times in the old context.
torch::Tensor yarn(int64_t dim, double base, const RopeScalingSettings& s) {
  const double old_context = static_cast<double>(s.original_max_positions);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(old_context / (rotations * 2 * std::numbers::pi))) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  auto extrapolation = unscaled(dim, base);
  auto interpolation = extrapolation / s.factor;
  auto ramp = ((at::arange(dim / 2, at::kDouble) - low) / (high - low)).clamp(0, 1);
  auto keep = 1 - ramp;  // 1: extrapolate (the unscaled frequency)
  return interpolation * (1 - keep) + extrapolation * keep;
}

}  // namespace

bool rotary_depends_on_length(const RopeScalingSettings& scaling, int64_t max_positions, int64_t T) {
  return scaling.type == RopeScalingType::kDynamic && T > max_positions;
}

RotaryFrequencies rotary_frequencies(int64_t head_dim, double theta, const RopeScalingSettings& s,
                                     int64_t max_positions, int64_t T) {
  RotaryFrequencies f;
  switch (s.type) {
    case RopeScalingType::kNone:
      f.inverse = unscaled(head_dim, theta);
      break;
    case RopeScalingType::kLinear:
      f.inverse = unscaled(head_dim, theta) / s.factor;
      break;
    case RopeScalingType::kDynamic: {
      // NTK-aware: the base grows with the length once it passes the model's position limit.
      const double len = static_cast<double>(std::max(T, max_positions)), limit = static_cast<double>(max_positions);
      const double d = static_cast<double>(head_dim);
      const double base = theta * std::pow(s.factor * len / limit - (s.factor - 1), d / (d - 2));
      f.inverse = unscaled(head_dim, base);
      break;
    }
    case RopeScalingType::kLlama3:
      f.inverse = llama3(unscaled(head_dim, theta), s);
      break;
    case RopeScalingType::kYarn:
      f.inverse = yarn(head_dim, theta, s);
      f.attention_scale = s.attention_factor > 0 ? s.attention_factor
                          : s.factor <= 1        ? 1.0
                                                 : 0.1 * std::log(s.factor) + 1.0;
      break;
  }
  return f;
}

}  // namespace gputrain
