// SGD with momentum, dampening and Nesterov, computed as torch.optim.SGD:
// weight decay here is L2 (wd * p added to the gradient), not decoupled, as
// torch's SGD does; the first step seeds the momentum buffer with the
// gradient. One fp32 buffer per parameter when momentum > 0, none otherwise.
// foreach only.
#pragma once
#include "config/settings.h"
#include "optim/optimizer.h"
#include "optim/optimizer_spec.h"

namespace gputrain {

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdSettings opts);
  void step(double lr) override;
  std::string describe() const override;

 private:
  SgdSettings opts_;
  std::vector<std::vector<torch::Tensor>> step_, momentum_buffer_;  // [group][parameter]
};

// optim.name: sgd, for the registry (optim/optimizer_specs.cpp).
const OptimizerSpec& sgd_spec();

}  // namespace gputrain
