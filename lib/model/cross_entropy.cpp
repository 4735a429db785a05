#include "model/cross_entropy.h"

#include <ATen/ATen.h>

namespace gputrain {

torch::Tensor cross_entropy_sum_reference(const torch::Tensor& logits, const torch::Tensor& targets,
                                          int64_t ignore_index) {
  const torch::Tensor l =
      logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat);
  return at::cross_entropy_loss(l, targets, /*weight=*/{}, at::Reduction::Sum, ignore_index);
}

torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                LogitsAfterLoss after) {
  if (fused_cross_entropy_available(logits)) return fused_cross_entropy_sum(logits, targets, ignore_index, after);
  if (chunked_cross_entropy_applies(logits)) return chunked_cross_entropy_sum(logits, targets, ignore_index, after);
  return cross_entropy_sum_reference(logits, targets, ignore_index);
}

bool may_overwrite_logits(const torch::Tensor& logits, LogitsAfterLoss after) {
  // A leaf, or a view of one, is the caller's own memory (a contiguous() copy made in forward is ours anyway).
  const bool callers_own = logits.is_leaf() || (logits.is_view() && logits._base().is_leaf());
  return after == LogitsAfterLoss::kReuseForGradient && !callers_own;
}

bool chunked_cross_entropy_applies(const torch::Tensor& logits) {
  // Low-precision logits only: fp32 ones need no upcast copy, and ATen's log-softmax on them measured
  // no slower (docs/benchmarks.md, "bf16 on the CPU").
  return logits.is_cpu() && logits.dim() == 2 && logits.size(1) > 0 &&
         (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kHalf);
}

#ifndef GPUTRAIN_WITH_CUDA  // else in cross_entropy_cuda.cpp
bool fused_cross_entropy_available(const torch::Tensor&) { return false; }
torch::Tensor fused_cross_entropy_sum(const torch::Tensor&, const torch::Tensor&, int64_t, LogitsAfterLoss) {
  TORCH_CHECK(false, "the fused cross-entropy needs the CUDA build");
}
#endif

}  // namespace gputrain
