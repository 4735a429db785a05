// Where the tokens of a context-parallel window are (parallel.cp): which places each rank of the
// cp group holds, each token's document (and branch), and from those which keys each query may see. Both
// attention methods (context_parallel.h) mask by it.
#pragma once
#include <torch/types.h>

#include "parallel/communicator.h"

namespace gputrain {

// The places in a window of T tokens that the rank at `place` of `size` holds: [T / size] int64,
// its two chunks of util/sequence_chunks.h in order.
torch::Tensor context_places(int64_t T, int place, int size, torch::Device device);

// One forward's layout over a cp group of n ranks holding Tl tokens each of B windows.
struct ContextLayout {
  torch::Tensor places;     // [n, Tl]: context_places of each rank
  torch::Tensor documents;  // [n, B, Tl]: each token's document in its window (the count of starts up to it)
  int64_t window = 0;       // model.sliding_window; 0 = none
  // [n, B, Tl] or undefined: each token's branch of its document (util/document_layout.h: a
  // preference pair's completions after their shared prompt, branch 0).
  torch::Tensor branches;

  // [B, 1, rows, Tl]: which of the keys held by rank `keys` the queries of rank `queries` (its rows
  // first_row.. first_row + rows; rows -1 = all) see: at or before the query's place, in its
  // document, within `window`, in the trunk or the query's own branch.
  torch::Tensor visible(int64_t queries, int64_t keys, int64_t first_row = 0, int64_t rows = -1) const;
  // [B, 1, Tl, n Tl]: the same for every rank's keys, in rank order.
  torch::Tensor visible_all(int64_t queries) const;
};

// The layout of tokens at `positions` [B, Tl] (context_part's: the window's places, or their
// documents' positions) and of their `branches` [B, Tl] (undefined: none), from every rank's (one
// small all-gather).
ContextLayout context_layout(const torch::Tensor& positions, const torch::Tensor& branches, int64_t window,
                             Communicator& cp);

}  // namespace gputrain
