// Tensor parallelism applied to a built Gpt from outside (Megatron-LM's
// layout, DESIGN rule 1). Every rank builds the whole model from the same
// seed, then keeps its shard:
// - attn.c_attn and mlp.c_fc are column-parallel: the rows of W (and b) for
//   this rank's heads (q, k and v each) and its MLP columns; the input enters
//   through copy_to_group (identity forward, gradient all-reduced backward);
// - attn.c_proj and mlp.c_proj are row-parallel: the matching columns of W;
//   partial products are all-reduced (reduce_from_group: sum forward,
//   identity backward) before the replicated bias is added.
// Embeddings, LayerNorms, biases of row-parallel layers and the output head
// stay whole on every rank; their gradients come out equal on every rank.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "model/gpt.h"
#include "parallel/communicator.h"

namespace gputrain {

// How a parameter is split over the tp group: dim -1 = replicated. The
// checkpoint shards and the gather for export and the norm use this.
struct TensorShard {
  std::string name;
  int64_t dim = -1;
  // c_attn's q, k and v sections are split each on its own: `sections` equal
  // parts along `dim`, this rank holding slice `rank` of each.
  int64_t sections = 1;
};

// Shards `model` for rank `tp.rank()` of `tp.size()`; returns every parameter's split.
std::vector<TensorShard> parallelize_tensor(Gpt& model, Communicator& tp);

// The slice of a whole tensor that rank `rank` of `size` holds, and the whole from all shards
// (in rank order): the inverse pair the checkpoint and export use.
torch::Tensor shard_of(const torch::Tensor& whole, const TensorShard& s, int rank, int size);
torch::Tensor unshard(const std::vector<torch::Tensor>& shards, const TensorShard& s);

// The two autograd functions (exposed for tests).
torch::Tensor copy_to_group(const torch::Tensor& x, Communicator& group);
torch::Tensor reduce_from_group(const torch::Tensor& x, Communicator& group);

}  // namespace gputrain
