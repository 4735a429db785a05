// A collective whose two tensors have different sizes (all-gather, reduce-scatter), run on flat
// copies: Gloo wants the ranks' parts joined along dim 0, and the communicator's device may not be
// the tensors' (ranks sharing one GPU over Gloo). Used by context parallelism's exchanges.
#pragma once
#include <torch/types.h>

#include <vector>

#include "parallel/communicator.h"

namespace gputrain {

// Runs `collective(out, in)` on `in` flattened on the communicator's device and hands `out` back in
// `out_shape` on `in`'s device.
template <typename Collective>
torch::Tensor through_wire(Communicator& comm, torch::Tensor in, const std::vector<int64_t>& out_shape,
                           Collective collective) {
  const torch::Device home = in.device(), wire = comm.tensor_device();
  in = in.to(wire).contiguous().view({-1});
  int64_t numel = 1;
  for (int64_t n : out_shape) numel *= n;
  torch::Tensor out = torch::empty({numel}, in.options());
  collective(out, in).wait();
  return out.view(out_shape).to(home);
}

}  // namespace gputrain
