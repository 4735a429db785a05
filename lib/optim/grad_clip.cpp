#include "optim/grad_clip.h"

#include <ATen/ATen.h>

namespace gputrain {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_ranks) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::Tensor total;
  if (sum_over_ranks) {
    // A rank may hold no gradient at all, but still takes part in the sum.
    at::Tensor squared = at::zeros({1}, params.empty() ? at::TensorOptions() : params.front().options().dtype(at::kFloat));
    if (!grads.empty()) squared += at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2, at::kFloat)), 2).square();
    sum_over_ranks(squared);
    total = squared.sqrt().reshape({});
  } else {
    if (grads.empty()) return at::zeros({});
    total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2, at::kFloat)), 2);
  }
  if (grads.empty()) return total;
  if (max_norm > 0) {
    // Always multiply (by 1 when under the limit) so no host sync is needed here.
    auto coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
  }
  return total;
}

}  // namespace gputrain
