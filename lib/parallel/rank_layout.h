// Which rank holds what: a pure function of the model's parameter shapes, the grid and the parallel
// settings, with no communication behind it. It says, for one rank, which tensor-parallel slice of
// each split parameter it holds, its pipeline stage, its experts, its chunks of each sequence, its
// place among the replicas that sum gradients, and which parameters ZeRO-1/2 give it to update.
// parallelize (parallel/parallelize.h) carries it out on a built model; the planners, `gputrain plan`
// and the checkpoint's row shares read it without building one. A new parallel degree changes this
// file and the code that carries it out (docs/contributing.md, "Adding a parallel degree").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/gpt_shapes.h"
#include "parallel/grid.h"
#include "parallel/tensor_shard.h"
#include "util/sequence_chunks.h"

namespace gputrain {

// How tensor parallelism splits parameter `name` (Megatron-LM's layout): c_attn (q, k, v apart) and
// c_fc (SwiGLU's gate and up apart) by rows, the two projections' weights by columns, the rest whole.
TensorShard tensor_split_of(const std::string& name, const ModelSettings& m);

// The expert parameter `name` belongs to (".mlp.experts.<e>."), or -1 where it is no expert's.
int64_t expert_of(const std::string& name);

// A parameter this rank holds: its name, its tensor-parallel slice's sizes (the whole where tp does
// not split it) and whether it trains, as a ParamShape the optimizer-state estimates read.
struct HeldParameter : ParamShape {
  bool expert = false;  // split by expert parallelism (shared by the expert replicas, not every replica)
  TensorShard split;    // dim -1: tp does not split it
  // ZeRO-1/2: the replica that updates it (of `replicas`, or of `expert_replicas` for an expert's);
  // -1 frozen. Whole runs in gradient order, as parallel/data_parallel.h partition_contiguous cuts them.
  int owner = -1;
};

struct RankLayout {
  Grid grid{1, 1, 1};
  GridCoord at;
  int64_t zero = 0;                             // parallel.zero where there are replicas to shard over, else 0
  std::vector<StageLayers> stages;              // every pipeline stage's layers
  StageLayers stage;                            // this rank's (all layers when pp = 1)
  int64_t first_expert = 0, local_experts = 0;  // this rank's experts of each mixture layer (all when ep = 1)
  SequenceChunks chunks;                        // of each sequence (one whole chunk when cp = 1)
  // The ranks holding the same dense weights and summing their gradients (dp x cp), in (dp, cp) order,
  // and those holding this rank's experts (every ep-th dp rank's cp ranks).
  int replica = 0, replicas = 1;
  int expert_replica = 0, expert_replicas = 1;
  std::vector<HeldParameter> parameters;  // what this rank holds, frozen ones included, in registration order
  std::map<std::string, size_t> index;    // parameters' positions by name

  bool holds_part() const { return grid.pp() > 1 || grid.ep() > 1; }  // not every parameter
  // ZeRO-1/2: whether this rank updates `p` (every trainable one without ZeRO).
  bool owns(const HeldParameter& p) const;
  const HeldParameter* find(const std::string& name) const;  // null where this rank does not hold it
};

// The layout of world rank `rank` of `g`. `shapes`: the whole model's parameters in registration
// order (model/gpt_shapes.h, or a built model's).
RankLayout rank_layout(const std::vector<ParamShape>& shapes, const ModelSettings& m, const ParallelSettings& p,
                       const Grid& g, int rank);

}  // namespace gputrain
