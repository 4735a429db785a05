// parallel.offload_optimizer: the optimizer's state and its update live on the
// CPU. Each (owned) parameter gets a CPU copy in page-locked memory; the
// optimizer is built over the copies. A step copies the gradients to the host,
// updates there, and copies the parameters back, so GPU memory holds only the
// weights, gradients and activations (ZeRO-Offload's split, without its
// overlap of the copies with compute).
#pragma once
#include <torch/types.h>

#include <vector>

#include "optim/param_groups.h"

namespace gputrain {

class CpuOffload {
 public:
  // `groups` on the device; the copies keep each parameter's dtype (the update is the same arithmetic).
  explicit CpuOffload(const std::vector<ParamGroup>& groups);

  // The same groups and names over the CPU copies: build the optimizer from these.
  const std::vector<ParamGroup>& cpu_groups() const { return cpu_groups_; }
  // Device gradients into the copies' .grad (a parameter without a gradient gets none).
  void gradients_to_host();
  // Updated copies back into the device parameters.
  void parameters_to_device();
  // The device parameters into the copies, after something other than the update changed them
  // (a checkpoint loaded in place: resume, spike rollback).
  void parameters_to_host();
  int64_t host_bytes() const;  // the copies and their gradients

 private:
  std::vector<ParamGroup> device_groups_, cpu_groups_;
};

}  // namespace gputrain
