#include "optim/lion.h"

#include <ATen/ATen.h>

namespace gputrain {

Lion::Lion(std::vector<ParamGroup> groups, LionSettings opts) : Optimizer(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    std::vector<torch::Tensor> steps, m;
    for (size_t i = 0; i < g.params.size(); ++i) {
      steps.push_back(add_step_counter(g.names[i]));
      m.push_back(
          add_state(g.names[i], "exp_avg", at::zeros(g.params[i].sizes(), g.params[i].options().dtype(at::kFloat))));
    }
    step_.push_back(std::move(steps));
    exp_avg_.push_back(std::move(m));
  }
}

std::string Lion::describe() const { return "lion, " + describe_kernel(UpdateKernel::kForeach, groups_); }

void Lion::step(double lr) {
  const double beta1 = opts_.betas[0], beta2 = opts_.betas[1];
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double group_lr = lr * g.lr_scale;
    for_each_fp32_working_set(
        g, [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads, const std::vector<size_t>& idx) {
          std::vector<at::Tensor> m;
          for (size_t k : idx) {
            ++count(step_[gi][k]);
            m.push_back(exp_avg_[gi][k]);
          }
          std::vector<at::Tensor> direction = at::_foreach_lerp(m, grads, 1.0 - beta1);
          at::_foreach_sign_(direction);
          if (g.weight_decay != 0) at::_foreach_mul_(params, 1.0 - group_lr * g.weight_decay);
          at::_foreach_add_(params, direction, -group_lr);
          at::_foreach_lerp_(m, grads, 1.0 - beta2);
        });
  }
}

// optim.name: lion (optim/optimizer_spec.h).
const OptimizerSpec& lion_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kLion,
      .summary = "Lion (Chen et al. 2023): `p -= lr * sign(b1 m + (1-b1) g)`",
      .keys = {"optim.lion."},
      .state_rule = [](const OptimSettings&) { return std::string("1 fp32 momentum = 4 bytes x parameters"); },
      .state_bytes = [](const OptimSettings&, const ParamShape& p) { return 4 * p.numel(); },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel, const RowSharding*)
          -> std::unique_ptr<Optimizer> { return std::make_unique<Lion>(std::move(groups), o.lion); }};
  return spec;
}

}  // namespace gputrain
