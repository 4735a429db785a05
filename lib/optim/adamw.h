// AdamW (decoupled weight decay, bias correction) over parameter groups, one
// fused multi-tensor update per group through ATen's _fused_adamw_ (CPU and
// CUDA kernels in LibTorch 2.x) instead of a loop of small ops per tensor.
// State is plain tensors under stable names for checkpoints. bf16 weights
// (precision.mode: bf16-pure) get fp32 moments and an fp32 update written
// back with stochastic rounding.
#pragma once
#include <torch/types.h>

#include <vector>

#include "optim/param_groups.h"

namespace gputrain {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

class AdamW {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions opts);

  // One update of every parameter that has a gradient, at learning rate lr * group.lr_scale.
  void step(double lr);
  void zero_grad();  // sets grads to undefined (frees them) like set_to_none=True
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // Bytes of optimizer state (exp_avg, exp_avg_sq, step) for metrics and docs.
  int64_t state_bytes() const;

 private:
  // bf16 weights: the update is computed in fp32 and stochastically rounded back.
  void step_bf16(const torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& m, torch::Tensor& v,
                 torch::Tensor& step, double lr, double weight_decay);
  struct GroupState {
    std::vector<torch::Tensor> exp_avg, exp_avg_sq, step;
  };
  std::vector<ParamGroup> groups_;
  std::vector<GroupState> state_;
  AdamWOptions opts_;
};

}  // namespace gputrain
