#include "util/document_layout.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace gputrain {

DocumentLayout DocumentLayout::to(torch::Device device) const {
  if (!defined() || positions.device() == device) return *this;
  const bool async = positions.is_pinned();
  return {positions.to(device, async), offsets.defined() ? offsets.to(device, async) : offsets, longest,
          branches.defined() ? branches.to(device, async) : branches};
}

DocumentLayout document_layout(const torch::Tensor& positions) {
  const torch::Tensor host = positions.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t n = host.numel();
  const int64_t* p = host.data_ptr<int64_t>();
  std::vector<int32_t> starts;
  int64_t longest = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] == 0) starts.push_back(static_cast<int32_t>(i));
    longest = std::max(longest, p[i] + 1);
  }
  starts.push_back(static_cast<int32_t>(n));
  torch::Tensor offsets = torch::tensor(starts, torch::kInt);
  // Beside the positions: page-locked with them (for the loader's asynchronous copies), or on their device.
  offsets = positions.is_pinned() ? offsets.pin_memory() : offsets.to(positions.device());
  return {positions, offsets, longest};
}

torch::Tensor document_ids(const torch::Tensor& positions) { return (positions == 0).cumsum(1); }

}  // namespace gputrain
