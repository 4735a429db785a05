// A checkpoint's tensors from every rank of a parallel run, joined on rank 0: the model and the
// optimizer state of each tensor-parallel shard (ZeRO: every dp rank's share merged in; pipeline
// stages and expert-parallel ranks joined into the whole model, so the files do not depend on pp or ep).
#pragma once
#include <vector>

#include "optim/optimizer.h"
#include "parallel/parallel_run.h"
#include "util/named_tensor.h"

namespace gputrain {

// One list per tp rank on rank 0; other ranks send theirs and get empty lists. Every rank calls it.
struct CheckpointShards {
  std::vector<std::vector<NamedTensor>> model, optimizer;
};
CheckpointShards gather_checkpoint(ParallelRun& par, const Optimizer& optimizer);

}  // namespace gputrain
