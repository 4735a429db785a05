#include "optim/adafactor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace gputrain {

Adafactor::Adafactor(std::vector<ParamGroup> groups, AdafactorSettings opts)
    : Optimizer(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    std::vector<Slot> slots;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& p = g.params[i];
      const std::string& n = g.names[i];
      const auto f32 = p.options().dtype(at::kFloat);
      Slot s;
      s.factored = p.dim() >= 2;
      s.step = add_step_counter(n);
      if (s.factored) {
        std::vector<int64_t> row(p.sizes().begin(), p.sizes().end() - 1);  // mean over the last dim
        std::vector<int64_t> col(p.sizes().begin(), p.sizes().end());      // mean over the second-last
        col.erase(col.end() - 2);
        s.row = add_state(n, "exp_avg_sq_row", at::zeros(row, f32));
        s.col = add_state(n, "exp_avg_sq_col", at::zeros(col, f32));
      } else {
        s.exp_avg_sq = add_state(n, "exp_avg_sq", at::zeros(p.sizes(), f32));
      }
      if (opts_.beta1 > 0) s.exp_avg = add_state(n, "exp_avg", at::zeros(p.sizes(), f32));
      slots.push_back(std::move(s));
    }
    slots_.push_back(std::move(slots));
  }
}

std::string Adafactor::describe() const {
  return std::string("adafactor, ") + describe_kernel(UpdateKernel::kForeach, groups_) +
         "; per-tensor factored statistics" + (opts_.beta1 > 0 ? ", momentum" : "") +
         (opts_.relative_step ? ", relative step" : "") + (opts_.scale_parameter ? ", parameter scale" : "");
}

void Adafactor::step(double lr) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double group_lr = lr * g.lr_scale;
    for_each_fp32_working_set(g, [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads,
                                     const std::vector<size_t>& idx) {
      // Per tensor: the second-moment statistics and the unclipped update
      // (their reductions have each tensor's own shape).
      std::vector<at::Tensor> updates, step_lr;
      for (size_t k = 0; k < idx.size(); ++k) {
        Slot& s = slots_[gi][idx[k]];
        const at::Tensor& grad = grads[k];
        const double t = static_cast<double>(++count(s.step));
        const double beta2t = 1.0 - std::pow(t, opts_.decay_rate);
        const at::Tensor sq = grad * grad + opts_.eps[0];
        at::Tensor update;
        if (s.factored) {
          s.row.mul_(beta2t).add_(sq.mean(-1), 1.0 - beta2t);
          s.col.mul_(beta2t).add_(sq.mean(-2), 1.0 - beta2t);
          const at::Tensor r = (s.row / s.row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
          const at::Tensor c = s.col.unsqueeze(-2).rsqrt();
          update = r * c * grad;
        } else {
          s.exp_avg_sq.mul_(beta2t).add_(sq, 1.0 - beta2t);
          update = s.exp_avg_sq.rsqrt() * grad;
        }
        updates.push_back(update);
        const double base = opts_.relative_step ? std::min(1e-2, 1.0 / std::sqrt(t)) : group_lr;
        // scale_parameter: lr * max(eps[1], RMS(p)), kept on the device (no sync).
        step_lr.push_back(opts_.scale_parameter
                              ? at::clamp_min(params[k].norm() / std::sqrt(static_cast<double>(params[k].numel())),
                                              opts_.eps[1]) * base
                              : at::full({}, base, params[k].options()));
      }
      // Clip each update to RMS <= clip_threshold, scale by its lr, then momentum.
      std::vector<at::Tensor> norms = at::_foreach_norm(updates);
      std::vector<at::Tensor> divisors;
      for (size_t k = 0; k < updates.size(); ++k)
        divisors.push_back(at::clamp_min(norms[k] / (std::sqrt(static_cast<double>(updates[k].numel())) *
                                                     opts_.clip_threshold), 1.0));
      at::_foreach_div_(updates, divisors);
      at::_foreach_mul_(updates, step_lr);
      if (opts_.beta1 > 0) {
        std::vector<at::Tensor> m;
        for (size_t k : idx) m.push_back(slots_[gi][k].exp_avg);
        at::_foreach_mul_(m, opts_.beta1);
        at::_foreach_add_(m, updates, 1.0 - opts_.beta1);
        updates = m;
      }
      if (g.weight_decay != 0) {
        // p -= wd * lr_t * p, with lr_t per tensor.
        std::vector<at::Tensor> decay = at::_foreach_mul(step_lr, -g.weight_decay);
        at::_foreach_add_(decay, 1.0);
        at::_foreach_mul_(params, decay);
      }
      at::_foreach_sub_(params, updates);
    });
  }
}

}  // namespace gputrain
