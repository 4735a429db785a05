// What one rank of a parallel run writes into a checkpoint, taken from what it holds, without any
// communication: every rank writes its own files, and the loader joins them (checkpoint/training_checkpoint.h).
// The first dp replica's ranks write each (stage, tp shard)'s weights; the optimizer state comes from
// there too, or from every dp rank under ZeRO; under expert parallelism the other ranks of the first
// ep run add their experts; under ZeRO-3 every rank writes its rows of every tensor.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/process_groups.h"
#include "parallel/rank_share.h"
#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

struct CheckpointPart {
  int rank = 0, tp_rank = 0, tp_size = 1;
  std::vector<NamedTensor> model, optimizer;
  // ZeRO-3: which rows of the whole tensor an entry holds (other entries are whole); for state laid
  // out in blocks of its parameter (optim/optimizer.h StateLayout), which blocks.
  std::map<std::string, RowSlice> model_rows, optimizer_rows, optimizer_blocks;
};

// `zero_state`: ZeRO splits the optimizer state over the dp group (GradientReducer::shards_optimizer_state).
CheckpointPart checkpoint_part(const ProcessGroups& groups, const RankShare& share, bool zero_state,
                               const Optimizer& optimizer);

}  // namespace gputrain
