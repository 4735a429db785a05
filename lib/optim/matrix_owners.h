// Updates that need each matrix whole (Muon's iteration) over matrices that tensor parallelism or
// ZeRO-3 split over ranks, as Moonlight's and torchtitan's distributed Muon do it: each matrix gets
// one owner rank of its group, chosen so that every rank computes about the same; one all-to-all
// brings every rank's shard of a matrix to its owner, which computes on the whole, and a second one
// brings each rank its shard of the result. Every matrix is computed once, not on every rank.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "optim/optimizer.h"

namespace gputrain {

// The owner of each of `costs`' items among `ranks` ranks: the costliest first, each to the rank with
// the least cost so far (the lowest on ties); the same on every rank.
std::vector<int> balance_owners(const std::vector<double>& costs, int ranks);

struct ShardedInput {
  const MatrixShards* shards = nullptr;
  torch::Tensor value;  // this rank's shard (every rank of the group holds one of the same shape)
};
// For `inputs` (in the same order on every rank of their groups), `compute` runs on each owner over
// the wholes it owns (joined from the shards, in their dtype; `which`: their indices in `inputs`) and
// returns a result per whole, shaped as it. Returns this rank's shard of every input's result (in
// `result_dtype`), in order.
using OwnerCompute = std::function<std::vector<torch::Tensor>(const std::vector<size_t>& which,
                                                              const std::vector<torch::Tensor>& wholes)>;
std::vector<torch::Tensor> compute_on_owners(const MatrixSharding& sharding, const std::vector<ShardedInput>& inputs,
                                             at::ScalarType result_dtype, const OwnerCompute& compute);

}  // namespace gputrain
