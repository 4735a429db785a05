// Updates that need each matrix whole (Muon's iteration) over matrices that tensor parallelism or
// ZeRO-3 split over ranks, as Moonlight's and torchtitan's distributed Muon do it: each matrix gets
// one owner rank of its group, chosen so that every rank computes about the same; one all-to-all
// brings every rank's shard of a matrix to its owner, which computes on the whole, and a second one
// brings each rank its shard of the result. Every matrix is computed once, not on every rank. Both
// exchanges are asynchronous: over a sequence of sets they travel while the neighbouring sets compute.
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <vector>

#include "optim/optimizer.h"

namespace gputrain {

// The owner of each of `costs`' items among `ranks` ranks: the costliest first, each to the rank with
// the least cost so far (the lowest on ties); the same on every rank.
std::vector<int> balance_owners(const std::vector<double>& costs, int ranks);
// The same starting from the cost each rank already has (`load`, one entry a rank), which it adds to:
// sets balanced one after another share the work evenly over all of them, not only within each.
std::vector<int> balance_owners(const std::vector<double>& costs, std::vector<double>& load);
// The cost given to each rank of each group (by MatrixShards::group) so far in a step.
using OwnerLoads = std::map<int, std::vector<double>>;

struct ShardedInput {
  const MatrixShards* shards = nullptr;
  torch::Tensor value;  // this rank's shard (every rank of the group holds one of the same shape)
};
// `compute` runs on each owner over the wholes it owns (joined from the shards, in their dtype;
// `which`: their indices in the set's inputs) and returns a result per whole, shaped as it.
using OwnerCompute = std::function<std::vector<torch::Tensor>(const std::vector<size_t>& which,
                                                              const std::vector<torch::Tensor>& wholes)>;

// One set of inputs (in the same order on every rank of their groups) through their owners, in three
// stages so that a caller can work while the shards travel.
class OwnerExchange {
 public:
  // Starts sending every input's shard to its owner, chosen to even out `loads` (the step's so far,
  // updated; null: this set's alone).
  OwnerExchange(const MatrixSharding& sharding, std::vector<ShardedInput> inputs, at::ScalarType result_dtype,
                OwnerLoads* loads = nullptr);
  ~OwnerExchange();
  OwnerExchange(OwnerExchange&&) noexcept;
  // Waits for the shards, runs `compute` on the wholes this rank owns and starts sending each rank
  // its shard of the results (in result_dtype).
  void compute(const OwnerCompute& compute);
  // Waits for them: this rank's shard of every input's result, in order.
  std::vector<torch::Tensor> finish();

 private:
  struct Group;
  std::vector<ShardedInput> inputs_;
  at::ScalarType result_dtype_;
  std::vector<Group> groups_;
};

// Sets 0 .. count-1 through their owners, pipelined: set k+1's shards travel to their owners while
// set k is computed, and set k's results travel back while set k+1 is. Owners are balanced over all the
// sets together (each rank about the same share of the whole step's work). `start(k)` returns set k's
// inputs (called in order); `finish(k, results)` takes this rank's shards of its results (in order,
// each after the next set's compute). Every rank of the groups runs the same sets.
using SetInputs = std::function<std::vector<ShardedInput>(size_t set)>;
using SetCompute = std::function<std::vector<torch::Tensor>(size_t set, const std::vector<size_t>& which,
                                                            const std::vector<torch::Tensor>& wholes)>;
using SetFinish = std::function<void(size_t set, std::vector<torch::Tensor> results)>;
void compute_on_owners_pipelined(const MatrixSharding& sharding, size_t count, at::ScalarType result_dtype,
                                 const SetInputs& start, const SetCompute& compute, const SetFinish& finish);

}  // namespace gputrain
