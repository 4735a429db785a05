// The dp x pp x cp x tp process grid (Megatron-LM's layout): tensor-parallel peers
// are adjacent ranks (one node, the fastest links), then context-parallel peers
// (they too talk inside every layer), then data-parallel replicas, then pipeline
// stages, so rank = ((pp * dp_size + dp) * cp_size + cp) * tp_size + tp.
// Also the split of the layer stack into pipeline stages. Pure arithmetic: no
// communication, so `gputrain plan --world-size N` prints it without running.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct GridCoord {
  int dp = 0, pp = 0, tp = 0, cp = 0;
};

class Grid {
 public:
  // parallel.dp 0 = auto (world / (tp * pp * cp)). Throws a config error naming
  // the key to change when the degrees do not multiply to `world_size`.
  Grid(const ParallelSettings& p, int world_size);
  Grid(int dp, int pp, int tp, int ep = 1, int cp = 1);

  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int tp() const { return tp_; }
  int ep() const { return ep_; }  // expert parallelism: consecutive dp ranks that split the experts
  int cp() const { return cp_; }  // context parallelism: the ranks that split each sequence
  // The ranks that hold the same weights and sum their gradients: every dp replica's cp ranks (each
  // computed the gradients of its own tokens).
  int replicas() const { return dp_ * cp_; }
  int size() const { return dp_ * pp_ * tp_ * cp_; }

  GridCoord coord(int rank) const;
  int rank_of(const GridCoord& c) const;
  // The world ranks of `rank`'s groups, in group-rank order.
  std::vector<int> tp_group(int rank) const;  // same dp, pp, cp: the shards of one layer
  std::vector<int> cp_group(int rank) const;  // same dp, pp, tp: the holders of one sequence's chunks
  // Same pp, tp: the replicas() that sum gradients (and share ZeRO's shards), in (dp, cp) order.
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;  // same dp, cp, tp: the stages a micro-batch flows through
  // Expert parallelism splits the dp ranks of one cp place into runs of ep consecutive dp ranks.
  std::vector<int> ep_group(int rank) const;  // rank's run: the ranks that split the experts
  // Same place in every run (and every cp place): the holders of rank's experts.
  std::vector<int> expert_replica_group(int rank) const;

 private:
  int dp_, pp_, tp_, ep_ = 1, cp_ = 1;
};

// The world the recipe's degrees imply: dp x tp x pp x cp (dp auto: the smallest, ep replicas of the
// model-parallel group).
int smallest_world(const ParallelSettings& p);

// Layers [first, last) of one pipeline stage, with the parts around the
// stack: the first stage embeds, the last applies ln_f, the head and the loss.
struct StageLayers {
  int64_t first = 0, last = 0;
  bool embeds = false, has_head = false;
  double cost = 0;  // relative compute (block FLOPs units), for the plan printout
};

// Contiguous stages of at least one block each whose largest compute cost is
// as small as it can be: a block costs 12 d^2 + 2 T d per token (its matmuls
// and attention), the last stage also pays the output head's V d.
std::vector<StageLayers> split_stages(const ModelSettings& m, int64_t pp);

// The pipeline's idle fraction with `micro` micro-batches: (pp - 1) / (micro + pp - 1),
// the same for gpipe and 1f1b (1f1b saves activation memory, not time).
double bubble_fraction(int64_t pp, int64_t micro);
// Micro-batches whose activations a stage holds at its peak: all of them under
// gpipe; under 1f1b the warm-up depth pp - stage, at most `micro`.
int64_t peak_micro_batches_held(PipelineSchedule schedule, int64_t pp, int64_t stage, int64_t micro);

}  // namespace gputrain
