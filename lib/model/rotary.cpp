#include "model/rotary.h"

#include <ATen/ATen.h>

namespace gputrain {

torch::Tensor rotary_inverse_frequencies(int64_t head_dim, double theta) {
  auto i = at::arange(0, head_dim / 2, at::kDouble);
  return at::pow(theta, i * (-2.0 / static_cast<double>(head_dim)));
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::tables(int64_t T, const torch::Tensor& like) {
  const auto key = std::make_tuple(like.device().type(), static_cast<int>(like.device().index()), like.scalar_type());
  auto it = cache_.find(key);
  if (it == cache_.end() || it->second.first.size(0) < T) {
    // Angles in float64 (float32 loses ~1e-4 rad by position 1000), then the
    // compute dtype: one small table per device and dtype, grown as needed.
    torch::NoGradGuard no_grad;
    auto angles = at::outer(at::arange(T, at::kDouble), rotary_inverse_frequencies(head_dim_, theta_));
    auto opts = like.options().requires_grad(false);
    it = cache_.insert_or_assign(key, std::make_pair(angles.cos().to(opts), angles.sin().to(opts))).first;
  }
  return {it->second.first.narrow(0, 0, T), it->second.second.narrow(0, 0, T)};
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x) {
  const int64_t T = x.size(-2), half = x.size(-1) / 2;
  auto [cos, sin] = tables(T, x);
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

}  // namespace gputrain
