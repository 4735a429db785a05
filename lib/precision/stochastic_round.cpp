#include "precision/stochastic_round.h"

#include <ATen/ATen.h>

namespace gputrain {

void stochastic_round_to_bf16(const torch::Tensor& src, const torch::Tensor& dst) {
  // bf16 is the top 16 bits of fp32. Adding uniform noise in [0, 2^16) to the
  // low 16 bits and truncating them rounds up with probability low/2^16.
  auto bits = src.contiguous().view(at::kInt);
  auto noise = at::randint(0, 1 << 16, bits.sizes(), bits.options());
  auto rounded = at::bitwise_and(bits + noise, int64_t{-65536} /* 0xFFFF0000 as int32 */);
  // Non-finite values keep their own bits (noise must not turn inf into nan).
  auto out = at::where(src.isfinite(), rounded, bits).view(at::kFloat);
  dst.copy_(out);  // exact: the low 16 bits are zero
}

}  // namespace gputrain
