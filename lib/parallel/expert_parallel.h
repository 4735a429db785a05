// Expert parallelism (parallel.ep), applied to a built Gpt from outside
// (DESIGN rule 1; the GShard / DeepSpeed-MoE layout). The ep ranks of a
// data-parallel group split every mixture layer's experts: group rank j holds
// experts [j E/ep, (j+1) E/ep), and the other ranks' experts become empty
// tensors (as another pipeline stage's layers do).
//
// Every rank still routes its own tokens with its own (replicated,
// data-parallel) router, capacity and balancing loss, exactly as with
// replicated experts; only where an expert runs changes. One all-to-all sends
// each routed row to the rank holding its expert, the experts run on
// everything they were sent, and a second all-to-all brings the outputs home.
// Backward runs the two exchanges in reverse. An expert's gradient is then
// its whole ep group's, and is summed over the dp / ep ranks that hold the
// same expert (parallel/gradient_reducer.h), not over the whole data-parallel group.
#pragma once
#include <torch/types.h>

#include <set>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"

namespace gputrain {

// Keeps this rank's share of every mixture layer's experts (rank ep.rank() of
// ep.size()) and installs the exchange; returns the names of the parameters
// it emptied (the other ranks' experts).
std::set<std::string> parallelize_experts(Gpt& model, Communicator& ep);

// Whether a parameter belongs to one expert of a mixture layer.
bool is_expert_parameter(const std::string& name);
// Whether expert parallelism splits parameter `name` in this run (its replicas share it, not the dp group).
bool ep_splits(const ProcessGroups& groups, const std::string& name);

// The differentiable exchange (exposed for tests): send[r] rows of x (dim 0,
// in rank order) go to rank r, recv[r] rows come from it. Its backward is the
// same exchange with send and recv swapped.
torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& send,
                              const std::vector<int64_t>& recv, Communicator& group);

}  // namespace gputrain
