// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// the update is the sign of an interpolation between the momentum and the
// gradient, so every coordinate moves by exactly lr. One fp32 momentum (4
// bytes per parameter). Because its steps are larger, Lion wants a 3-10x
// smaller lr and a 3-10x larger weight decay than AdamW. foreach only.
//   c = beta1 m + (1 - beta1) g;  p = p (1 - lr wd) - lr sign(c);  m = beta2 m + (1 - beta2) g
#pragma once
#include "config/settings.h"
#include "optim/optimizer.h"
#include "optim/optimizer_spec.h"

namespace gputrain {

class Lion : public Optimizer {
 public:
  Lion(std::vector<ParamGroup> groups, LionSettings opts);
  void step(double lr) override;
  std::string describe() const override;

 private:
  LionSettings opts_;
  std::vector<std::vector<torch::Tensor>> step_, exp_avg_;  // [group][parameter]
};

// optim.name: lion, for the registry (optim/optimizer_specs.cpp).
const OptimizerSpec& lion_spec();

}  // namespace gputrain
