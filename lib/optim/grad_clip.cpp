#include "optim/grad_clip.h"

#include <ATen/ATen.h>

namespace gputrain {
namespace {

std::vector<at::Tensor> defined_grads(const std::vector<torch::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

torch::Tensor squared_grad_norm(const std::vector<torch::Tensor>& params, const torch::TensorOptions& options) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = defined_grads(params);
  at::Tensor squared = at::zeros({1}, options.dtype(at::kFloat));
  if (!grads.empty()) squared += at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2, at::kFloat)), 2).square();
  return squared;
}

void scale_grads_to_norm(const std::vector<torch::Tensor>& params, const torch::Tensor& norm, double max_norm) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = defined_grads(params);
  if (grads.empty() || max_norm <= 0) return;
  // Always multiply (by 1 when under the limit) so no host sync is needed here.
  auto coef = at::clamp_max(max_norm / (norm + 1e-6), 1.0);
  at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = defined_grads(params);
  if (grads.empty()) return at::zeros({});
  at::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2, at::kFloat)), 2);
  scale_grads_to_norm(params, total, max_norm);
  return total;
}

}  // namespace gputrain
