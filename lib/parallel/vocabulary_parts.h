// The embedding and the output head where ZeRO-3 spreads a vocabulary table's rows over the ranks,
// computed part by part so that no rank holds the whole table or its whole gradient (GPT-2's
// 50k x 1024 table is 196 MiB in fp32; Llama 3's 128k x 4096, 2 GiB). Each rank's rows are broadcast
// in turn, in pieces of at most 32 MiB (and at most a quarter of a rank's rows), the next piece in
// flight while one is used. The head merges each piece's logits into a running log-sum-exp, and its
// backward broadcasts the pieces again and recomputes their logits; the lookup takes the rows of the
// tokens a piece holds. Each piece's gradient is summed onto the rank that owns it (a reduce).
#pragma once
#include <torch/types.h>

#include "metrics/parallel_reports.h"
#include "parallel/communicator.h"

namespace gputrain {

// How the table [rows, d_model] is spread: rank r of `group` holds rows [r * shard_rows,
// (r + 1) * shard_rows) of it, the last ranks' shards padded with zero rows.
struct VocabularyRows {
  Communicator* group = nullptr;
  int64_t rows = 0, shard_rows = 0;
  torch::ScalarType dtype = torch::kFloat;  // what the rows are sent and used in (ZeRO-3's gather dtype)
  torch::Device compute = torch::kCPU;
  ShardTraffic* traffic = nullptr;  // where the broadcasts and reductions are counted (may be null)
  int64_t piece_rows = 0;           // rows sent at a time; 0: chosen as above
  // This rank's rows in `dtype` where they are kept apart from its shard (ZeRO-3's gather copy, the
  // fp32 shard living in a file): the pieces are sent from them. Undefined: from the shard.
  torch::Tensor values;
};

// `shard` is this rank's rows of the table (a leaf): backward adds its gradient (this rank's rows of
// the whole gradient, summed over the group) straight into shard.grad(), not through autograd.

// -log softmax(y W^T)[target] per target [N] in fp32 (0 where ignore_index); y [N, d_model] on
// `rows.compute`, computed in autocast's dtype where autocast is on (as a linear layer would). A
// preference loss sums each sequence's apart; training's next-token loss, their sum.
torch::Tensor sharded_head_token_losses(const torch::Tensor& y, const torch::Tensor& shard,
                                        const torch::Tensor& targets, const VocabularyRows& rows, int64_t ignore_index);
torch::Tensor sharded_head_loss_sum(const torch::Tensor& y, const torch::Tensor& shard, const torch::Tensor& targets,
                                    const VocabularyRows& rows, int64_t ignore_index);

// The logits y W^T [N, rows], without gradients (evaluation, sampling).
torch::Tensor sharded_head_logits(const torch::Tensor& y, const torch::Tensor& shard, const VocabularyRows& rows);

// The rows of W that `tokens` (int64, any shape) name: [..., d_model] in `rows.dtype`.
torch::Tensor sharded_embedding(const torch::Tensor& tokens, const torch::Tensor& shard, const VocabularyRows& rows);

}  // namespace gputrain
