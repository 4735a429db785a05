// The one place parallelism is applied to a built model, in a fixed order, as torchtitan's
// parallelize_llama: tensor parallelism (each split layer keeps this rank's slice), context
// parallelism (attention gathers the sequence's other chunks), the pipeline stage
// (this rank's blocks), expert parallelism (its experts), activation checkpointing (over the blocks
// this rank runs), then data parallelism (the replicas' weights made equal; ZeRO-3: each rank keeps its
// rows; gradient buckets and ZeRO's ownership). Each step is a no-op where its degree is 1 or its policy
// none. Model code knows nothing of ranks: everything rank-dependent happens here, over the run's
// process groups (parallel/process_groups.h). The trainer sees parallelism only through what this
// returns, the groups and the world sums of parallel/replica_sums.h.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>

#include "config/settings.h"
#include "model/gpt.h"
#include "model/part_reader.h"
#include "optim/optimizer_placement.h"
#include "parallel/gradient_reducer.h"
#include "parallel/initial_parts.h"
#include "parallel/pipeline_stages.h"
#include "parallel/process_groups.h"
#include "parallel/rank_share.h"
#include "parallel/tensor_shard.h"

namespace gputrain {

// What parallelize needs beyond the groups: the recipe's parallel and activation-checkpointing keys,
// the run's device and what the optimizer needs of ZeRO-3's shards (zero3_shard_blocks).
struct ParallelizeOptions {
  ParallelSettings parallel;
  CheckpointingPolicy checkpointing = CheckpointingPolicy::kNone;
  int64_t checkpoint_every = 2;
  torch::Device device = torch::kCPU;
  ShardBlocks shard_blocks;
};

struct ParallelModel {
  RankShare share;                             // what this rank holds
  std::unique_ptr<GradientReducer> gradients;  // the step's gradient reduction, clipping and ZeRO
  std::unique_ptr<PipelineStages> pipeline;    // pp > 1; null otherwise
  // Built on meta: what each of this rank's parameters is a part of, to read it again (no files kept).
  std::unique_ptr<InitialParts> parts;
};

// `model`: built on the meta device (model/meta_build.h, as runs build it): each rank's part gets
// storage and its values, from `files` for the parameters they cover (model.init_from, a resumed
// checkpoint), else from the seed. Or built with its whole weights (tests; on the host under ZeRO-3,
// which moves only this rank's shards to the device).
ParallelModel parallelize(Gpt& model, const ProcessGroups& groups, const ParallelizeOptions& options,
                          const PartReader* files = nullptr);

// A frozen model laid out as the trained one (DPO's reference copy, train/reference_model.h): its tp
// slices, experts and ZeRO-3 rows (gathered unit by unit in its forward), never gradients, a
// reducer or optimizer state. Built on meta: filled from `files` (model.init_from) or the seed. In
// evaluation mode; what this rank holds is returned (ZeRO-3's shards stay alive with the model's hooks).
RankShare parallelize_frozen(Gpt& model, const ProcessGroups& groups, ParallelizeOptions options,
                             const PartReader* files = nullptr);

// A model built on meta: whether `files` (a checkpoint of this run) hold every weight this rank holds,
// so that reread_parts can read this rank's parts of them again in place (a spike rollback), each
// rank reading only its part. False where the model was built whole.
bool rereads_parts(const ParallelModel& par, const PartReader& files);
void reread_parts(ParallelModel& par, const PartReader& files);

// Where this rank's optimizer over `groups` keeps its state (optim/optimizer_placement.h), with what
// ZeRO-3 gives one in a file: its units, and the bf16 copies the gathers read in place of the fp32
// shards, which move to the file too. `output_dir`: the file's folder without parallel.offload_dir.
OptimizerPlacement rank_optimizer_placement(ParallelModel& par, const ParallelizeOptions& options,
                                            const std::vector<ParamGroup>& groups, const std::string& output_dir,
                                            bool device_named_cpu);

// The grid and what this rank holds and does, for the log.
std::string describe_parallelism(const ProcessGroups& groups, const ParallelizeOptions& options,
                                 const ParallelModel& par);

}  // namespace gputrain
