#include "optim/grad_clip.h"

#include <ATen/ATen.h>

namespace gputrain {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return at::zeros({});
  auto norms = at::_foreach_norm(grads, 2, at::kFloat);
  auto total = at::linalg_vector_norm(at::stack(norms), 2);
  if (max_norm > 0) {
    // Always multiply (by 1 when under the limit) so no host sync is needed here.
    auto coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
  }
  return total;
}

}  // namespace gputrain
