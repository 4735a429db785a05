#include "optim/host_offloaded_optimizer.h"

#include <fmt/format.h>

namespace gputrain {

HostOffloadedOptimizer::HostOffloadedOptimizer(std::vector<ParamGroup> groups, const MakeOptimizer& make)
    : Optimizer(groups), offload_(groups), inner_(make(offload_.cpu_groups())) {
  adopt_state(*inner_);
}

void HostOffloadedOptimizer::step(double lr) {
  offload_.gradients_to_host();
  inner_->step(lr);
  offload_.parameters_to_device();
}

std::string HostOffloadedOptimizer::placement() const {
  return fmt::format("offloaded: state, update and a {:.1f} MiB copy of the parameters in pinned host memory",
                     static_cast<double>(offload_.host_bytes()) / (1024.0 * 1024.0));
}

}  // namespace gputrain
