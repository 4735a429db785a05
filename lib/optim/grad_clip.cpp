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

torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm) {
  if (max_norm <= 0) return {};
  torch::NoGradGuard no_grad;
  // Always a multiplier (1 when under the limit), so no host sync is needed.
  return at::clamp_max(max_norm / (norm.to(at::kFloat).reshape({}) + 1e-6), 1.0);
}

void scale_grads_to_norm(const std::vector<torch::Tensor>& params, const torch::Tensor& norm, double max_norm,
                         torch::Tensor* fold) {
  torch::NoGradGuard no_grad;
  torch::Tensor coef = clip_coefficient(norm, max_norm);
  if (fold) {
    *fold = coef;
    return;
  }
  const std::vector<at::Tensor> grads = defined_grads(params);
  if (grads.empty() || !coef.defined()) return;
  at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm, torch::Tensor* fold) {
  torch::NoGradGuard no_grad;
  if (fold) *fold = torch::Tensor();
  const std::vector<at::Tensor> grads = defined_grads(params);
  if (grads.empty()) return at::zeros({});
  at::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2, at::kFloat)), 2);
  scale_grads_to_norm(params, total, max_norm, fold);
  return total;
}

}  // namespace gputrain
