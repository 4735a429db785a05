// The one place parallelism is applied to a built model (its whole weights loaded), in a fixed
// order, as torchtitan's parallelize_llama: tensor parallelism (each split layer keeps this rank's
// slice), the pipeline stage (this rank's blocks), expert parallelism (its experts), activation
// checkpointing (over the blocks this rank runs), then data parallelism (the replicas' weights made
// equal, gradient buckets, ZeRO's ownership). Each step is a no-op where its degree is 1 or its
// policy none. Model code knows nothing of ranks: everything rank-dependent happens here.
#pragma once
#include <cstdint>
#include <vector>

#include "config/settings.h"
#include "model/gpt.h"
#include "parallel/parallel_run.h"
#include "util/named_tensor.h"

namespace gputrain {

struct ParallelizedModel {
  std::vector<NamedTensor> params;  // the parameters this rank holds, frozen ones included, in registration order
  int64_t recomputed_blocks = 0;    // blocks that activation checkpointing recomputes in backward
};

ParallelizedModel parallelize(Gpt& model, ParallelRun& par, const TrainSettings& train);

}  // namespace gputrain
