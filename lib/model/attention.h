// The ways a layer's attention is computed (CausalSelfAttentionImpl, model/gpt.h picks one):
// scaled_dot_product_attention's fused kernels, the spelled-out math (model.attention: math), a
// sliding window's mask, and packed documents (data.*.document_attention), where each token sees
// only the earlier tokens of its own document.
#pragma once
#include <torch/types.h>

#include <memory>
#include <vector>

#include "config/settings.h"
#include "util/document_layout.h"

namespace gputrain {

// The positions a query may see under a sliding window of `window` (model.sliding_window):
// itself and the window - 1 before it. [T, T] bool, true = attend.
torch::Tensor sliding_window_mask(int64_t T, int64_t window, const torch::Tensor& like);

// softmax(Q K^T / sqrt(D) + mask) V, spelled out: the reference the fused kernels are compared with,
// and a fallback where they misbehave. It materializes the [B, H, T, T] scores. Grouped keys/values
// are repeated to one per query head. `allowed` (optional, broadcast to the scores) replaces the
// causal mask.
torch::Tensor math_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, double dropout_p,
                             const torch::Tensor& allowed);

// A packed batch's documents as every layer's attention reads them, made once per forward (by
// model/gpt.cpp's run of the blocks). How a layer then attends (attend_documents):
// - CUDA, with the documents' offsets: variable-length flash attention over the flattened batch
//   (bf16/fp16; the memory-efficient kernel in fp32): no [T, T] mask, no work across documents.
// - CPU, with the offsets: each document's own causal attention, one after another; faster than
//   one masked attention over the window (docs/benchmarks.md, "Packed documents"). With branches
//   (no window): each document's trunk and first branch as one causal attention, each further
//   branch's queries against the trunk's keys and its own.
// - Otherwise (positions alone, as in a CUDA graph's static copy, or model.attention: math; an
//   fp32 sliding window on CUDA; branches on CUDA or under a window): one [B, 1, T, T] mask of
//   same-document, causal (and in-window, and same-branch-or-trunk) pairs, built from the positions
//   by device operations at first use.
class DocumentAttention {
 public:
  explicit DocumentAttention(DocumentLayout layout);
  const DocumentLayout& layout() const { return layout_; }
  // The flattened batch (B x T tokens) cut into consecutive pieces, each attended on its own (CPU
  // path; empty where the layout's offsets are not on the host). A piece's queries see its own
  // tokens causally and, for a branch after the first, the first `trunk` tokens of piece
  // `trunk_piece` before them (`mask`: [length, trunk + length]).
  struct Piece {
    int64_t length = 0;
    int64_t trunk_piece = -1;  // -1: the piece alone
    int64_t trunk = 0;
    torch::Tensor mask;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The [B, 1, T, T] mask, under a sliding window of `window` (0: none). Built once, then kept: a
  // forward's layers share one model.sliding_window.
  const torch::Tensor& allowed(int64_t window) const;

 private:
  DocumentLayout layout_;
  std::vector<Piece> pieces_;
  mutable torch::Tensor allowed_;
};

// A layer's causal attention: q [B, H, T, D], k and v [B, Hkv, T, D] (H a multiple of Hkv) ->
// [B, H, T, D], each query seeing the keys at or before it, within `window` of it when window > 0
// (model.sliding_window). Under a window shorter than T: flash attention's own window on CUDA
// (bf16/fp16), else a [T, T] mask.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t window,
                               double dropout_p, AttentionImpl impl);

// The attention of one layer over packed documents: q [B, H, T, D], k and v [B, Hkv, T, D] (H a
// multiple of Hkv) -> [B, H, T, D], each query attending to its document's keys at or before it
// (and within `window` of it when window > 0).
torch::Tensor attend_documents(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const DocumentAttention& documents, int64_t window, double dropout_p,
                               AttentionImpl impl);

}  // namespace gputrain
