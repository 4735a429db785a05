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
// LoRA adapters split with their layer (lora_B of a column-parallel layer by
// rows, lora_A of a row-parallel one by columns) through LinearImpl::lora_tap.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/tensor_shard.h"

namespace gputrain {

// Shards `model` for rank `tp.rank()` of `tp.size()`; returns every parameter's split.
std::vector<TensorShard> parallelize_tensor(Gpt& model, Communicator& tp);

// The two autograd functions (exposed for tests).
torch::Tensor copy_to_group(const torch::Tensor& x, Communicator& group);
// (`what`: the sum, for the communicator's error messages; a string literal.)
torch::Tensor reduce_from_group(const torch::Tensor& x, Communicator& group,
                                const char* what = "tensor-parallel partial products");

}  // namespace gputrain
