// The ring method of context-parallel attention (parallel.cp_method: ring). Each rank's keys and
// values travel round the cp group one rank's block at a time; while the next block is on the wire
// the queries attend to the one at hand, and the partial results merge exactly through their
// log-sum-exp (running max and sum). Backward recomputes each block's weights from the final
// log-sum-exp, and the blocks' key and value gradients travel the ring back to their owners. Nothing
// whole-sequence is held: memory per rank is the local tokens, two blocks and one tile of query
// rows' scores and mask.
#pragma once
#include <torch/types.h>

#include "parallel/communicator.h"
#include "parallel/context_layout.h"

namespace gputrain {

// How a tile of query rows attends to a block: kFused = ATen's flash kernel for the CPU (fused,
// returning the log-sum-exp); kTiled = float32 matmuls (any device; the GPU's path until a fused
// kernel with a log-sum-exp is wired there); kAuto = kFused on the CPU.
enum class RingKernel { kAuto, kFused, kTiled };

// Query rows attending to a block of Tl keys at a time: as many as keep one tile's float32
// [B, H, rows, Tl] scores within 64 MiB (at least 16, at most Tl). The tile's mask is built alone.
int64_t ring_tile_rows(int64_t B, int64_t H, int64_t Tl);

// The bytes a ring pass works in besides its inputs, output and gradients, at its peak in backward (what
// the plan counts): the key and value block [B, Tl, kv_width] of `element` bytes at hand, sent and
// received, and its float32 gradients likewise; the block repeated for the query heads
// ([B, Tl, q_width]: grouped-query attention; float32 for the float32 tiles), its float32 gradient
// and the fused kernel's per-tile one; and one tile of query rows' mask, its booleans plus the fused
// CPU kernel's additive copy or, for the float32 tiles (`float32_tiles`: the GPU's path), the tile's
// float32 scores, weights and their gradient.
double ring_working_bytes(int64_t B, int64_t H, int64_t q_width, int64_t kv_width, int64_t Tl, double element,
                          bool float32_tiles);

// q [B, H, Tl, D], k and v [B, Hkv, Tl, D] of this rank's tokens -> [B, H, Tl, D] in q's dtype:
// the exact attention of `layout` over the whole window (merged in float32). tile_rows 0 =
// ring_tile_rows.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ContextLayout& layout, Communicator& cp, RingKernel kernel = RingKernel::kAuto,
                             int64_t tile_rows = 0);

}  // namespace gputrain
