// Global-norm gradient clipping with multi-tensor ops (one norm kernel over
// all gradients, one scale), as torch.nn.utils.clip_grad_norm_(foreach=True).
#pragma once
#include <torch/types.h>

#include <vector>

namespace gputrain {

// Returns the global L2 norm before clipping (a 0-dim float tensor, not synced
// to the host). Scales gradients by max_norm / norm when the norm exceeds it;
// max_norm <= 0 only measures. With `fold` given, the gradients are left
// alone and *fold receives the coefficient instead, for an optimizer that
// applies it in its own pass (Optimizer::folds_grad_scale).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm, torch::Tensor* fold = nullptr);

// The two halves, for callers that assemble the norm from parts held by
// different processes (GradientReducer: ZeRO-2's and tensor parallelism's shards
// summed over their groups, replicated tensors counted once).
// The sum of squares of the defined gradients of `params`: a 1-element float
// tensor on `options`' device, 0 when there are none.
torch::Tensor squared_grad_norm(const std::vector<torch::Tensor>& params, const torch::TensorOptions& options);
// min(1, max_norm / norm) as a 0-dim float32 tensor, without a host sync; undefined for max_norm <= 0.
torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm);
// Scales every defined gradient by clip_coefficient(norm, max_norm), or hands that coefficient to *fold
// (when given) instead; max_norm <= 0 does nothing (*fold becomes undefined).
void scale_grads_to_norm(const std::vector<torch::Tensor>& params, const torch::Tensor& norm, double max_norm,
                         torch::Tensor* fold = nullptr);

}  // namespace gputrain
