// Activation checkpointing: a checkpointed block keeps only its input in
// forward and recomputes its activations in backward, trading about one
// extra forward of that block for its activation memory.
//   full       every block
//   selective  blocks 0, k, 2k, ... (k = train.checkpoint_every): memory and
//              recompute both scale with the fraction 1/k
// The recomputation replays the forward's random numbers (dropout: CPU and
// CUDA generator states are saved and restored, and the outer stream is left
// where it was) and its autocast state, so gradients equal the plain ones.
// Applied from outside the model code (DESIGN rule 1).
#pragma once
#include "config/settings.h"
#include "model/gpt.h"

namespace gputrain {

// Marks the blocks to recompute; returns how many.
int64_t apply_activation_checkpointing(Gpt& model, CheckpointingPolicy policy, int64_t every);

// y = block(x) without saving the block's activations; `documents` (packed batches; may be null)
// is kept for the recomputation.
torch::Tensor checkpointed_block_forward(BlockImpl& block, const torch::Tensor& x,
                                         std::shared_ptr<const DocumentAttention> documents = nullptr);

// True while this thread replays a checkpointed block's forward in backward:
// code that counts forwards (mixture-of-experts statistics) skips the replay.
bool recomputing_activations();

}  // namespace gputrain
