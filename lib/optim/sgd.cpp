#include "optim/sgd.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

namespace gputrain {

Sgd::Sgd(std::vector<ParamGroup> groups, SgdSettings opts) : Optimizer(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    std::vector<torch::Tensor> steps, buffers;
    for (size_t i = 0; i < g.params.size(); ++i) {
      steps.push_back(add_step_counter(g.names[i]));
      if (opts_.momentum > 0)
        buffers.push_back(add_state(g.names[i], "momentum_buffer",
                                    at::zeros(g.params[i].sizes(), g.params[i].options().dtype(at::kFloat))));
    }
    step_.push_back(std::move(steps));
    momentum_buffer_.push_back(std::move(buffers));
  }
}

std::string Sgd::describe() const {
  return "sgd, " + describe_kernel(UpdateKernel::kForeach, groups_) +
         (opts_.momentum > 0 ? (opts_.nesterov ? "; nesterov momentum" : "; momentum") : "");
}

// torch.optim.SGD's _multi_tensor_sgd.
void Sgd::step(double lr) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double group_lr = lr * g.lr_scale;
    for_each_fp32_working_set(
        g, [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads, const std::vector<size_t>& idx) {
          std::vector<at::Tensor> d = g.weight_decay != 0 ? at::_foreach_add(grads, params, g.weight_decay) : grads;
          if (opts_.momentum > 0) {
            std::vector<at::Tensor> bufs, later_bufs, later_d;
            for (size_t k = 0; k < idx.size(); ++k) {
              at::Tensor& buf = momentum_buffer_[gi][idx[k]];
              bufs.push_back(buf);
              if (count(step_[gi][idx[k]]) == 0) {
                buf.copy_(d[k]);  // the first step: buffer = gradient
              } else {
                later_bufs.push_back(buf);
                later_d.push_back(d[k]);
              }
            }
            if (!later_bufs.empty()) {
              at::_foreach_mul_(later_bufs, opts_.momentum);
              at::_foreach_add_(later_bufs, later_d, 1.0 - opts_.dampening);
            }
            d = opts_.nesterov ? at::_foreach_add(d, bufs, opts_.momentum) : bufs;
          }
          for (size_t k : idx) ++count(step_[gi][k]);
          at::_foreach_add_(params, d, -group_lr);
        });
  }
}

// optim.name: sgd (optim/optimizer_spec.h).
const OptimizerSpec& sgd_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kSgd,
      .summary = "torch.optim.SGD: momentum, dampening, Nesterov",
      .keys = {"optim.sgd."},
      .state_rule =
          [](const OptimSettings& o) {
            return std::string(o.sgd.momentum > 0 ? "1 fp32 momentum buffer = 4 bytes x parameters" : "none");
          },
      .state_bytes = [](const OptimSettings& o,
                        const ParamShape& p) { return o.sgd.momentum > 0 ? 4 * p.numel() : int64_t{0}; },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel, const RowSharding*)
          -> std::unique_ptr<Optimizer> { return std::make_unique<Sgd>(std::move(groups), o.sgd); },
      .check =
          [](const OptimSettings& o, const std::function<bool(const std::string&)>&) {
            std::vector<OptimizerProblem> problems;
            if (o.sgd.nesterov && (o.sgd.momentum == 0 || o.sgd.dampening != 0))
              problems.push_back({"optim.sgd.nesterov",
                                  "needs momentum > 0 and dampening 0 (momentum " +
                                      nlohmann::json(o.sgd.momentum).dump() + ", dampening " +
                                      nlohmann::json(o.sgd.dampening).dump() + ")",
                                  "set optim.sgd.momentum (e.g. 0.9) and optim.sgd.dampening: 0, or nesterov: false",
                                  /*error=*/true});
            return problems;
          }};
  return spec;
}

}  // namespace gputrain
