// What one rank holds of the model after parallelize (parallel/parallelize.h): a value the loop,
// the checkpoint and the optimizer read, with no communication behind it. Its tensor-parallel
// shards, its pipeline stage, its experts, and under ZeRO-3 its rows of every parameter.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/grid.h"
#include "parallel/rank_layout.h"
#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

class FullyShardedModel;

struct RankShare {
  // Which parameters, slices, stage, experts and sequence chunks this rank holds, as parallelize carried
  // it out (parallel/rank_layout.h).
  RankLayout layout;
  // The parameters this rank holds, frozen ones included, in registration order (ZeRO-3: its shards).
  std::vector<NamedTensor> weights;
  std::vector<TensorShard> tensor_split;  // how each parameter is split over the tp group (empty: tp = 1)
  // pp > 1 with tied embeddings, on the first and last stage: the stage's wte (ZeRO-3: its shard).
  torch::Tensor tied_weight;
  std::shared_ptr<FullyShardedModel> fully_sharded;  // ZeRO-3 (also the model's unit hooks); null otherwise
  int64_t recomputed_blocks = 0;                     // blocks activation checkpointing recomputes in backward
  int64_t initialized_bytes = 0;  // built on meta: the bytes this rank gave storage and initial values (0: built whole)
  int64_t quantized_bytes = 0;    // model.quantize: the 4-bit base's bytes on this rank (model/quantized_weight.h)

  // The entries of `named` this rank holds (its stage's, its experts), in their order.
  std::vector<NamedTensor> held_of(std::vector<NamedTensor> named) const;
  // Whether parameter `name` counts as this rank's stage's (in the global gradient norm, in a ZeRO-3
  // checkpoint): the tied embedding's copy on the last stage does not (the first stage's does).
  bool stage_counts(const std::string& name) const;
  const StageLayers& stage() const { return layout.stage; }
  bool runs_head() const { return layout.stage.has_head; }  // the last (or only) stage
};

}  // namespace gputrain
