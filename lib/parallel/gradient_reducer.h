// The gradients of one rank's share of the model (parallel/rank_share.h) through a step: reduced over
// the replicas during backward (GradientSync's buckets; ZeRO-3's shards), the tied embedding summed over
// the pipeline's ends, an fp16 overflow agreed on, the global norm clipped, and under ZeRO the owners'
// updates sent to the other replicas. It also cuts the optimizer's groups and a checkpoint's state to
// what this rank updates. Built by parallelize; on a single process every call is local.
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/settings.h"
#include "metrics/parallel_reports.h"
#include "optim/param_groups.h"
#include "parallel/data_parallel.h"
#include "parallel/process_groups.h"
#include "parallel/rank_share.h"
#include "util/named_tensor.h"

namespace gputrain {

class Optimizer;

class GradientReducer {
 public:
  // Makes the replicas' weights equal (their group's first rank's), installs the gradient hooks and
  // decides ZeRO's ownership. `share`: what parallelize kept on this rank, ZeRO-3's shards made.
  GradientReducer(const ProcessGroups& groups, const ParallelSettings& p, RankShare share);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Called before each micro-batch's backward with whether it is the last (the gradient buckets
  // start their reductions during the last one); empty when no gradients are reduced.
  std::function<void(bool last)> backward_hook();
  // Waits for the reductions; sums the tied embedding's over the pipeline's ends.
  void finish();
  // An fp16 overflow anywhere skips the step everywhere. Ranks disagree only when they hold
  // different gradients (ZeRO-2's shards, tensor-parallel shards), so only then does this all-reduce.
  bool overflow_on_any_rank(bool local_overflow);
  // Global gradient norm and clipping over every parameter of the model, each value counted once
  // (ZeRO-2 and tensor-parallel shards summed over their groups). `fold`: hand the clipping
  // coefficient back instead of scaling (optim/grad_clip.h).
  torch::Tensor clip_grad_norm(double max_norm, torch::Tensor* fold = nullptr);
  void after_optimizer_step();  // ZeRO: owners broadcast their updated parameters

  // Whether ZeRO splits the optimizer state over the dp group (each rank holds its owned share).
  bool shards_optimizer_state() const { return zero_active(); }
  // The optimizer's groups cut down to the parameters this rank updates (its stage's; ZeRO: its
  // share; ZeRO-3: every parameter's shard in its place).
  std::vector<ParamGroup> owned_groups(std::vector<ParamGroup> groups) const;
  // Saved optimizer state cut down the same way (a checkpoint holds all of it; ZeRO-3: this rank's
  // rows of each tensor of `optimizer`'s state that follows its parameter's rows).
  std::map<std::string, torch::Tensor> owned_state(std::map<std::string, torch::Tensor> state,
                                                   const Optimizer& optimizer) const;

  // This rank's MiB of trainable weights, gradients (as last reduced) and optimizer state.
  RankMemory memory(const Optimizer& optimizer) const;
  // The last step's reductions: when each bucket started, against backward's end; none without dp.
  std::optional<GradSyncTimes> sync_times() const;
  std::string describe() const;  // data parallelism and ZeRO-1/2, for the log

 private:
  // Parameters kept equal over a group of ranks: their gradients are summed there and ZeRO splits
  // their ownership there. The dense parameters' group is the dp group; under expert parallelism
  // each expert's is its holders.
  struct Replicas {
    Communicator* group = nullptr;    // null: this rank is their only holder
    std::vector<NamedTensor> params;  // trainable, in gradient order
    std::vector<int> owners;          // ZeRO: the group rank that updates params[i]
    std::unique_ptr<GradientSync> sync;
  };
  bool zero_active() const { return zero_ > 0 && groups_.dp() != nullptr; }
  // ZeRO-1 and 2: whole parameters owned by one rank each (ZeRO-3 shards every one instead).
  bool owns_whole_parameters() const { return zero_active() && !share_.fully_sharded; }
  // Rank 0 of r.group's weights (`named`, frozen ones included) to the group, ZeRO ownership, gradient hooks.
  void replicate(Replicas& r, const std::vector<NamedTensor>& named);
  const HeldParameter& held(const std::string& name) const;  // this rank's layout's entry
  // The parameters this rank updates: ZeRO's owned share (of its stage's), or its stage's under a
  // pipeline; null when it updates the whole model it has.
  const std::set<std::string>* updated_names() const {
    return owns_whole_parameters() ? &owned_ : share_.layout.holds_part() ? &held_ : nullptr;
  }
  // Whether ranks of one dp group hold different gradients (so norms and overflow need the world).
  bool ranks_differ() const { return zero_ >= 2 || groups_.tp() || groups_.pp() || groups_.ep(); }

  const ProcessGroups& groups_;
  const int64_t zero_;
  const double bucket_mb_;
  const RankShare share_;
  std::vector<NamedTensor> params_;  // trainable, in gradient order
  std::vector<char> sharded_;        // params_[i] is split over the tp group
  std::vector<char> expert_;         // ep > 1: params_[i] is one of this rank's experts
  std::set<std::string> owned_;      // ZeRO: names of the parameters this rank updates
  std::set<std::string> held_;       // pp or ep > 1: the names this rank holds
  Replicas dense_;                   // over the dp group (all parameters but ep > 1's experts)
  Replicas experts_;                 // ep > 1: this rank's experts, over the expert replicas
  int64_t grad_bytes_ = 0;           // gradients this rank held after the last reduction
};

}  // namespace gputrain
