#include "train/weight_copies.h"

#include <ATen/ATen.h>

#include "model/linear.h"

namespace gputrain {

WeightCopies attach_weight_copies(Gpt& model, Optimizer& optimizer, const Precision& precision, bool runs_head) {
  WeightCopies made;
  if (!precision.uses_autocast() || precision.autocast_dtype() != c10::kBFloat16 || !optimizer.writes_bf16_copies())
    return made;
  torch::NoGradGuard no_grad;
  // The weight's value rounded to nearest (ATen's conversion, which the kernels' matches).
  auto copy_for = [&](const torch::Tensor& weight) -> torch::Tensor {
    if (!weight.defined() || weight.numel() == 0 || weight.scalar_type() != at::kFloat || !optimizer.updates(weight))
      return {};
    torch::Tensor copy = weight.detach().to(at::kBFloat16).contiguous();
    optimizer.set_bf16_copy(weight, copy);
    made.tensors += 1;
    made.bytes += static_cast<int64_t>(copy.nbytes());
    return copy;
  };
  for (const auto& module : model->modules(/*include_self=*/false))
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->weight_copy = copy_for(linear->weight);
  if (model->cfg.tie_embeddings && runs_head) model->head_weight_copy = copy_for(model->transformer->wte->weight);
  return made;
}

void refresh_weight_copies(Gpt& model) {
  torch::NoGradGuard no_grad;
  for (const auto& module : model->modules(/*include_self=*/false))
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get()); linear && linear->weight_copy.defined())
      linear->weight_copy.copy_(linear->weight);
  if (model->head_weight_copy.defined()) model->head_weight_copy.copy_(model->transformer->wte->weight);
}

}  // namespace gputrain
