// Where the documents of a packed batch are (data.*.document_attention): what the data loader
// writes and the model's attention and positions read, so that each token sees only its own
// document and counts its position from that document's start. Shared by data/ and model/,
// which cannot include each other.
#pragma once
#include <torch/types.h>

namespace gputrain {

struct DocumentLayout {
  // [B, T] int64: each token's place in its document, 0 where one starts (every row starts one).
  torch::Tensor positions;
  // The documents of the flattened batch (B x T tokens, row after row): int32 [documents + 1], each
  // one's first token and then B x T (flash attention's cumulative sequence lengths), on the
  // positions' device; and the longest document's length. Undefined where only the positions are
  // kept (a CUDA graph's static copy): attention then builds its mask from them.
  torch::Tensor offsets;
  int64_t longest = 0;
  // Optional [B, T] int64: branches of a document that share its start (a preference pair's prompt
  // computed once, data/preference_pairs.h). Branch 0 is the shared trunk; a token of branch b > 0
  // sees its document's trunk and its own branch only, positions counting on from the trunk's end.
  torch::Tensor branches;

  bool defined() const { return positions.defined(); }
  // The same layout on `device` (asynchronous copies from page-locked memory).
  DocumentLayout to(torch::Device device) const;
};

// The layout of `positions` [B, T] (offsets where a position is 0). Reads them on the host: a
// synchronizing copy where they are on a device.
DocumentLayout document_layout(const torch::Tensor& positions);

// Each token's document number in its row of `positions` [B, T] (the count of document starts up
// to it): tokens of one document share it. Attention's mask and context parallelism's chunks both
// compare these.
torch::Tensor document_ids(const torch::Tensor& positions);

}  // namespace gputrain
