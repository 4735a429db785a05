// How a tensor-parallel parameter is split over the tp group, and the pair of
// functions that cut a whole tensor into a rank's shard and join the shards
// back. Pure tensor arithmetic: the checkpoint reader joins a tensor-parallel
// checkpoint's shard files with it, without any process group.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "model/initial_values.h"

namespace gputrain {

// dim -1 = replicated (every rank holds the whole tensor).
struct TensorShard {
  std::string name;
  int64_t dim = -1;
  // Parts along `dim` that are split each on its own, as relative sizes: this
  // rank holds slice `rank` of each. c_attn's q, k, v are {n_head, n_kv_head,
  // n_kv_head}; SwiGLU's gate and up {1, 1}; a plain split {1}. Relative
  // sizes describe the whole tensor and every shard alike.
  std::vector<int64_t> sections = {1};
};

// The slice of a whole tensor that rank `rank` of `size` holds, and the whole from all shards
// (in rank order): the inverse pair the checkpoint and export use.
torch::Tensor shard_of(const torch::Tensor& whole, const TensorShard& s, int rank, int size);
torch::Tensor unshard(const std::vector<torch::Tensor>& shards, const TensorShard& s);
// Which elements of the whole (`whole`'s) that slice holds: shard_of run over the index.
WholeIndex shard_index(const WholeIndex& whole, const TensorShard& s, int rank, int size);

// Rows [first, first + rows of the piece) of a whole tensor of `whole_rows` rows along dim 0: what a
// ZeRO-3 rank writes of each tensor into a checkpoint (its shard without the padding).
struct RowSlice {
  int64_t first = 0, whole_rows = 0;
};
struct RowPiece {
  RowSlice slice;
  torch::Tensor rows;
};
// ZeRO-3's rows of a tensor of `rows` rows for dp rank `rank` of `size`: each rank a shard of
// ceil(rows / size) rows, rounded up to a multiple of `row_multiple`; its real rows start at
// min(rank * shard_rows, rows) (the rest is padding).
struct RankRows {
  int64_t first = 0, count = 0, shard_rows = 0;
};
RankRows rank_rows(int64_t rows, int rank, int size, int64_t row_multiple = 1);

// Which parameters' ZeRO-3 shards start on a whole block of `block` elements of the flattened
// parameter (adamw8bit's quantization blocks: each shard's blocks are then the whole tensor's, so
// sharded state is the same as one process's), by parameter name and element count.
struct ShardBlocks {
  int64_t block = 1;
  std::function<bool(const std::string& parameter, int64_t numel)> applies;  // empty: none
  // The multiple of rows a shard of that parameter has (1 where no block applies).
  int64_t row_multiple(const std::string& parameter, int64_t rows, int64_t row_numel) const;
};
// The whole tensor from pieces that cover its rows exactly once (any order); otherwise an undefined
// tensor, and *problem names the gap or the overlap.
torch::Tensor join_rows(std::vector<RowPiece> pieces, std::string* problem);

}  // namespace gputrain
