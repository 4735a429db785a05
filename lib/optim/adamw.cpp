#include "optim/adamw.h"

#include <ATen/ATen.h>

namespace gputrain {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opts) : groups_(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    GroupState s;
    for (const auto& p : g.params) {
      s.exp_avg.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      s.exp_avg_sq.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      // The fused kernel reads the step count from a float tensor on the parameter's device.
      s.step.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    }
    state_.push_back(std::move(s));
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    GroupState& s = state_[gi];
    std::vector<at::Tensor> params, grads, m, v, steps;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const auto& grad = g.params[i].grad();
      if (!grad.defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(grad);
      m.push_back(s.exp_avg[i]);
      v.push_back(s.exp_avg_sq[i]);
      steps.push_back(s.step[i]);
    }
    if (params.empty()) continue;
    at::_foreach_add_(steps, 1.0);
    at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr * g.lr_scale, opts_.beta1, opts_.beta2,
                      g.weight_decay, opts_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

void AdamW::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = at::Tensor();
}

int64_t AdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& s : state_)
    for (size_t i = 0; i < s.exp_avg.size(); ++i)
      n += s.exp_avg[i].nbytes() + s.exp_avg_sq[i].nbytes() + s.step[i].nbytes();
  return n;
}

}  // namespace gputrain
