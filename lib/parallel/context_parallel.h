// Context parallelism (parallel.cp): the ranks of a cp group split each sequence. A window of T
// tokens is cut into 2 cp chunks of T / (2 cp) and the rank at place r holds chunks r and
// 2 cp - 1 - r, so that every rank has the same causal attention work (an early chunk sees few keys,
// its partner many). Every layer but attention runs on those tokens alone, at their places in the
// window (rotary and learned positions are the window's). Attention gathers every rank's keys and
// values (all-gather; their gradients go back by reduce-scatter) and masks by the tokens' places,
// their documents and model.sliding_window: each rank's queries get the one-process attention.
#pragma once
#include <torch/types.h>

#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "parallel/communicator.h"

namespace gputrain {

// The places in a window of T tokens that the rank at `place` of `size` holds: [T / size] int64,
// chunk `place` and then chunk 2 size - 1 - place.
torch::Tensor context_places(int64_t T, int place, int size, torch::Device device);

// This rank's part of a batch: its tokens and targets, its target count, and the tokens' positions
// (the window's places, or their documents' positions under data.*.document_attention), which the
// gathering attention reads.
Batch context_part(const Batch& b, int place, int size);
std::vector<Batch> context_parts(const std::vector<Batch>& batches, const Communicator& cp);

// Every block of `model` attends through the cp group (after tensor parallelism: each rank gathers
// the heads it computes).
void parallelize_context(Gpt& model, Communicator& cp);

// The gathering attention alone, as each block runs it: q [B, H, Tl, D], k and v [B, Hkv, Tl, D] of
// the tokens at `positions` [B, Tl] (context_part's) -> [B, H, Tl, D].
torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& positions, int64_t window, double dropout_p, AttentionImpl impl,
                                Communicator& cp);

}  // namespace gputrain
