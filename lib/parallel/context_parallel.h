// Context parallelism (parallel.cp): the ranks of a cp group split each sequence. A window of T
// tokens is cut into 2 cp chunks of T / (2 cp) and the rank at place r holds chunks r and
// 2 cp - 1 - r, so that every rank has the same causal attention work (an early chunk sees few keys,
// its partner many). Every layer but attention runs on those tokens alone, at their places in the
// window (rotary and learned positions are the window's). Attention meets every rank's keys and
// values by parallel.cp_method: allgather gathers them all (their gradients go back by
// reduce-scatter) and masks by the tokens' places, their documents and model.sliding_window; ring
// passes them round one block at a time (ring_attention.h). Each rank's queries get the
// one-process attention.
#pragma once
#include <torch/types.h>

#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "parallel/communicator.h"
#include "parallel/context_layout.h"

namespace gputrain {

// This rank's part of a batch: its tokens and targets (a preference batch's chosen-sequence targets
// too), its target count, and the tokens' positions (the window's places, or their documents'
// positions under data.*.document_attention) and branches, which the attention masks by. What
// describes whole rows (a preference batch's pairs, lengths, reference log-probabilities) stays.
Batch context_part(const Batch& b, int place, int size);
std::vector<Batch> context_parts(const std::vector<Batch>& batches, const Communicator& cp);

// Every block of `model` attends through the cp group by `method` (after tensor parallelism: each
// rank exchanges the heads it computes).
void parallelize_context(Gpt& model, Communicator& cp, ContextMethod method);

// The context-parallel attention alone, as each block runs it: q [B, H, Tl, D], k and v
// [B, Hkv, Tl, D] of the tokens at `tokens`' positions [B, Tl] (context_part's; and branches, where
// defined) -> [B, H, Tl, D].
torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const DocumentLayout& tokens, int64_t window, double dropout_p, AttentionImpl impl,
                                ContextMethod method, Communicator& cp);

}  // namespace gputrain
