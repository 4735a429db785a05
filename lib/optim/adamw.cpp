#include "optim/adamw.h"

#include <ATen/ATen.h>

#include <cmath>

namespace gputrain {

kernels::AdamWScalars adamw_scalars(const AdamWOptions& o, int64_t t, double lr, double weight_decay) {
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  return {static_cast<float>(o.beta1),        static_cast<float>(o.beta2),
          static_cast<float>(o.eps),          static_cast<float>(lr / bc1),
          static_cast<float>(std::sqrt(bc2)), static_cast<float>(1.0 - lr * weight_decay)};
}

uint64_t rounding_seed(int64_t step, size_t tensor_serial) {
  return static_cast<uint64_t>(step) * 0x100000001b3ull + tensor_serial * 0x9e3779b97f4a7c15ull;
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opts, UpdateKernel kernel)
    : Optimizer(std::move(groups)), opts_(opts), kernel_(kernel) {
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.params.size() && kernel_ == UpdateKernel::kFused; ++i)
      if (!g.params[i].is_contiguous()) {  // the fused loops index raw memory
        spdlog::warn("adamw: parameter {} is not contiguous; using the foreach update", g.names[i]);
        kernel_ = UpdateKernel::kForeach;
      }
  for (const auto& g : groups_) {
    std::vector<Slot> slots;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& p = g.params[i];
      const std::string& n = g.names[i];
      const auto moments = p.options().dtype(at::kFloat);  // also for bf16 parameters
      slots.push_back({add_step_counter(n), add_state(n, "exp_avg", at::zeros(p.sizes(), moments)),
                       add_state(n, "exp_avg_sq", at::zeros(p.sizes(), moments))});
    }
    slots_.push_back(std::move(slots));
  }
}

std::string AdamW::describe() const { return "adamw, " + describe_kernel(kernel_, groups_); }

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  if (kernel_ == UpdateKernel::kForeach) {
    for (size_t gi = 0; gi < groups_.size(); ++gi) step_foreach(groups_[gi], slots_[gi], lr * groups_[gi].lr_scale);
    return;
  }
  std::vector<FusedAdamWItem> items;
  size_t serial = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i, ++serial) {
      const at::Tensor& grad = g.params[i].grad();
      if (!grad.defined()) continue;
      Slot& s = slots_[gi][i];
      const int64_t t = ++count(s.step);
      items.push_back({g.params[i], grad.to(g.params[i].scalar_type()).contiguous(), s.exp_avg, s.exp_avg_sq,
                       adamw_scalars(opts_, t, lr * g.lr_scale, g.weight_decay), rounding_seed(t, serial), grad_scale_,
                       bf16_copy_of(g.params[i])});
    }
  }
  fused_adamw(items);
}

// torch.optim.AdamW's _multi_tensor_adamw (non-capturable): scalars per
// tensor for the bias corrections, everything else one op per list.
void AdamW::step_foreach(const ParamGroup& g, std::vector<Slot>& slots, double lr) {
  for_each_fp32_working_set(
      g, [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads, const std::vector<size_t>& idx) {
        std::vector<at::Tensor> m, v;
        std::vector<at::Scalar> step_size, bc2_sqrt;
        for (size_t k : idx) {
          Slot& s = slots[k];
          const auto sc = adamw_scalars(opts_, ++count(s.step), lr, g.weight_decay);
          m.push_back(s.exp_avg);
          v.push_back(s.exp_avg_sq);
          step_size.emplace_back(-static_cast<double>(sc.step_size));
          bc2_sqrt.emplace_back(static_cast<double>(sc.bias_correction2_sqrt));
        }
        if (g.weight_decay != 0) at::_foreach_mul_(params, 1.0 - lr * g.weight_decay);
        at::_foreach_lerp_(m, grads, 1.0 - opts_.beta1);
        at::_foreach_mul_(v, opts_.beta2);
        at::_foreach_addcmul_(v, grads, grads, 1.0 - opts_.beta2);
        std::vector<at::Tensor> denom = at::_foreach_sqrt(v);
        at::_foreach_div_(denom, bc2_sqrt);
        at::_foreach_add_(denom, opts_.eps);
        at::_foreach_addcdiv_(params, m, denom, step_size);
      });
}

// optim.name: adamw (optim/optimizer_spec.h).
const OptimizerSpec& adamw_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kAdamW,
      .summary = "torch.optim.AdamW: decoupled weight decay, bias correction",
      .keys = {"optim.betas", "optim.eps"},
      .fused = [](const torch::Device& device) { return fused_update_available(device); },
      .state_rule = [](const OptimSettings&) { return std::string("2 fp32 moments = 8 bytes x parameters"); },
      .state_bytes = [](const OptimSettings&, const ParamShape& p) { return 8 * p.numel(); },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel kernel,
                 const RowSharding*) -> std::unique_ptr<Optimizer> {
        return std::make_unique<AdamW>(std::move(groups), AdamWOptions{o.betas[0], o.betas[1], o.eps}, kernel);
      }};
  return spec;
}

}  // namespace gputrain
