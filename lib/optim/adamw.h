// AdamW (Loshchilov & Hutter: decoupled weight decay, bias-corrected
// moments), as torch.optim.AdamW computes it. Two update kernels:
//   foreach: ATen multi-tensor ops over each group's parameters (~8 passes
//            over memory, any device);
//   fused:   one pass per element (fused_update.h): our CUDA kernel, or a
//            parallel C++ loop on CPU.
// Moments are fp32, also for bf16 parameters (precision.mode: bf16-pure),
// whose fp32 update is written back with stochastic rounding.
#pragma once
#include "optim/fused_update.h"
#include "optim/optimizer.h"
#include "optim/optimizer_spec.h"

namespace gputrain {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions opts, UpdateKernel kernel = UpdateKernel::kFused);
  void step(double lr) override;
  std::string describe() const override;
  bool folds_grad_scale() const override { return kernel_ == UpdateKernel::kFused; }
  bool writes_bf16_copies() const override { return kernel_ == UpdateKernel::kFused; }

 private:
  struct Slot {
    torch::Tensor step, exp_avg, exp_avg_sq;
  };
  void step_foreach(const ParamGroup& g, std::vector<Slot>& slots, double lr);
  AdamWOptions opts_;
  UpdateKernel kernel_;
  std::vector<std::vector<Slot>> slots_;  // [group][parameter]
};

// The per-tensor scalars of the update at step t (1-based) with lr and weight decay.
kernels::AdamWScalars adamw_scalars(const AdamWOptions& o, int64_t t, double lr, double weight_decay);

// Stochastic-rounding seed of one tensor's update: distinct per step and tensor, same on resume.
uint64_t rounding_seed(int64_t step, size_t tensor_serial);

// optim.name: adamw, for the registry (optim/optimizer_specs.cpp).
const OptimizerSpec& adamw_spec();

}  // namespace gputrain
