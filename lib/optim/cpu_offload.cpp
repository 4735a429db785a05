#include "optim/cpu_offload.h"

#include "util/device.h"

#include <optional>

namespace gputrain {

namespace {

torch::Tensor host_like(const torch::Tensor& t) {
  // Page-locked only for a CUDA tensor: pinning needs the CUDA runtime, and it is what makes the copies asynchronous.
  return torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(t.is_cuda()).requires_grad(false));
}

}  // namespace

CpuOffload::CpuOffload(const std::vector<ParamGroup>& groups) : device_groups_(groups), cpu_groups_(groups) {
  torch::NoGradGuard no_grad;
  for (auto& g : cpu_groups_)
    for (auto& p : g.params) {
      torch::Tensor copy = host_like(p);
      copy.copy_(p.detach());
      p = copy;
    }
}

void CpuOffload::gradients_to_host() {
  torch::NoGradGuard no_grad;
  std::optional<torch::Device> cuda;
  for (size_t g = 0; g < device_groups_.size(); ++g)
    for (size_t i = 0; i < device_groups_[g].params.size(); ++i) {
      const torch::Tensor& grad = device_groups_[g].params[i].grad();
      torch::Tensor& host = cpu_groups_[g].params[i];
      if (!grad.defined()) {
        host.mutable_grad() = torch::Tensor();
        continue;
      }
      if (!host.grad().defined()) host.mutable_grad() = host_like(grad);
      host.mutable_grad().copy_(grad, /*non_blocking=*/grad.is_cuda());
      if (grad.is_cuda()) cuda = grad.device();
    }
  if (cuda) synchronize(*cuda);  // the asynchronous copies have landed before the CPU update reads them
}

void CpuOffload::parameters_to_device() {
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < device_groups_.size(); ++g)
    for (size_t i = 0; i < device_groups_[g].params.size(); ++i)
      device_groups_[g].params[i].detach().copy_(cpu_groups_[g].params[i], /*non_blocking=*/true);
}

void CpuOffload::parameters_to_host() {
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < device_groups_.size(); ++g)
    for (size_t i = 0; i < device_groups_[g].params.size(); ++i)
      cpu_groups_[g].params[i].copy_(device_groups_[g].params[i].detach());  // blocking: read before it returns
}

int64_t CpuOffload::host_bytes() const {
  int64_t n = 0;
  for (const auto& g : cpu_groups_)
    for (const auto& p : g.params) n += static_cast<int64_t>(p.nbytes()) + (p.grad().defined() ? p.grad().nbytes() : 0);
  return n;
}

}  // namespace gputrain
