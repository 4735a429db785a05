#include "optim/adamw.h"

#include <ATen/ATen.h>

#include "precision/stochastic_round.h"

namespace gputrain {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opts) : groups_(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    GroupState s;
    for (const auto& p : g.params) {
      // bf16 weights keep fp32 moments (see step()).
      const auto moment_dtype = p.scalar_type() == at::kBFloat16 ? at::kFloat : p.scalar_type();
      s.exp_avg.push_back(at::zeros_like(p, p.options().dtype(moment_dtype), at::MemoryFormat::Preserve));
      s.exp_avg_sq.push_back(at::zeros_like(p, p.options().dtype(moment_dtype), at::MemoryFormat::Preserve));
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
      if (g.params[i].scalar_type() == at::kBFloat16) {
        step_bf16(g.params[i], grad, s.exp_avg[i], s.exp_avg_sq[i], s.step[i], lr * g.lr_scale, g.weight_decay);
        continue;
      }
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

void AdamW::step_bf16(const at::Tensor& param, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, at::Tensor& step,
                      double lr, double weight_decay) {
  // One tensor at a time, so the fp32 copies cost only the largest tensor's size.
  std::vector<at::Tensor> p32{param.to(at::kFloat)}, g32{grad.to(at::kFloat)}, ms{m}, vs{v}, steps{step};
  at::_foreach_add_(steps, 1.0);
  at::_fused_adamw_(p32, g32, ms, vs, /*max_exp_avg_sqs=*/{}, steps, lr, opts_.beta1, opts_.beta2, weight_decay,
                    opts_.eps, /*amsgrad=*/false, /*maximize=*/false);
  stochastic_round_to_bf16(p32[0], param);
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
