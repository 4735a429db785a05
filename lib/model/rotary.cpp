#include "model/rotary.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "model/rope_scaling.h"

namespace gputrain {

RotaryEmbedding::RotaryEmbedding(const ModelSettings& m)
    : head_dim_(m.head_width()),
      theta_(m.rope_theta),
      scaling_(m.rope_scaling),
      max_positions_(m.position_limit()),
      seq_len_(m.seq_len) {}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::tables(int64_t T, const torch::Tensor& like) {
  const auto key = std::make_tuple(like.device().type(), static_cast<int>(like.device().index()), like.scalar_type());
  auto it = cache_.find(key);
  // Dynamic scaling past the position limit gives each length its own frequencies.
  const bool per_length = rotary_depends_on_length(scaling_, max_positions_, T);
  const bool stale =
      it == cache_.end() || it->second.length < T ||
      ((per_length || rotary_depends_on_length(scaling_, max_positions_, it->second.length)) && it->second.length != T);
  if (stale) {
    // Angles in float64 (float32 loses ~1e-4 rad by position 1000), then the
    // compute dtype: one small table per device and dtype, grown as needed.
    torch::NoGradGuard no_grad;
    const RotaryFrequencies f = rotary_frequencies(head_dim_, theta_, scaling_, max_positions_, T);
    auto angles = at::outer(at::arange(T, at::kDouble), f.inverse);
    auto opts = like.options().requires_grad(false);
    Tables t{(angles.cos() * f.attention_scale).to(opts), (angles.sin() * f.attention_scale).to(opts), T};
    it = cache_.insert_or_assign(key, std::move(t)).first;
  }
  return {it->second.cos.narrow(0, 0, T), it->second.sin.narrow(0, 0, T)};
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, int64_t offset) {
  const int64_t T = x.size(-2);
  auto [all_cos, all_sin] = tables(offset + T, x);
  return rotate(x, all_cos.narrow(0, offset, T), all_sin.narrow(0, offset, T));
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, const torch::Tensor& positions) {
  const int64_t B = x.size(0), T = x.size(-2), half = x.size(-1) / 2;
  auto [all_cos, all_sin] = tables(std::max(T, seq_len_), x);
  const torch::Tensor flat = positions.reshape({-1});
  // [B, 1, T, D/2]: one row of angles per token, shared by the heads.
  auto per_token = [&](const torch::Tensor& table) { return table.index_select(0, flat).view({B, 1, T, half}); };
  return rotate(x, per_token(all_cos), per_token(all_sin));
}

torch::Tensor RotaryEmbedding::rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

}  // namespace gputrain
