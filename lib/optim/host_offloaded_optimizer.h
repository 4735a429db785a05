// parallel.offload_optimizer cpu on a CUDA run (optim/optimizer_placement.h): an optimizer built over
// pinned host copies of the parameters (optim/cpu_offload.h). Its step copies the gradients to the
// host, updates there and copies the parameters back; its state is the inner optimizer's, under the
// same names, so a checkpoint is the in-memory run's.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optim/cpu_offload.h"
#include "optim/optimizer.h"

namespace gputrain {

class HostOffloadedOptimizer : public Optimizer {
 public:
  using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;
  // `groups` on the device; `make` builds the optimizer of their host copies.
  HostOffloadedOptimizer(std::vector<ParamGroup> groups, const MakeOptimizer& make);

  void step(double lr) override;
  std::string describe() const override { return inner_->describe(); }  // as in memory: checkpoints agree
  std::string placement() const override;
  void parameters_changed() override { offload_.parameters_to_host(); }
  // (folds_grad_scale stays false: the update reads the host copies of the gradients, not the ones clipped.)

 private:
  CpuOffload offload_;
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace gputrain
