// What the training loop asks of parallelism, in one place: over the run's process groups
// (parallel/process_groups.h: the world, its grid and this rank's groups), tensor, pipeline and
// expert parallelism applied to the model from outside (in order by parallel/parallelize.h), data
// parallelism (GradientSync) and ZeRO over the dp group. What
// it measures is written to summary.json by metrics/parallel_reports.h; checkpoint/checkpoint_part.h
// takes what each rank writes of a checkpoint. A single-process run has a ParallelRun too; every
// call is then a no-op, so the loop has one shape.
//
// Quantities counted once per model replica (the loss, target tokens, the
// gradient norm's replicated part) are summed over the world with only the
// ranks that hold them contributing, so one all-reduce serves every grid.
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "config/settings.h"
#include "metrics/parallel_reports.h"
#include "optim/param_groups.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

class Optimizer;
class FullyShardedModel;

class ParallelRun {
 public:
  // Joins the world (for more than one process) and checks the recipe against it. `blocks`: what
  // the optimizer needs of ZeRO-3's shards (parallel/fully_sharded.h zero3_shard_blocks).
  ParallelRun(const World& world, const ParallelSettings& p, torch::Device device, ShardBlocks blocks = {});
  ~ParallelRun();

  // The world, its grid, this rank's place and groups, and collectives over the world.
  const ProcessGroups& groups() const { return groups_; }
  int dp_rank() const { return groups_.coord().dp; }  // which share of each global batch this rank reads
  int tp_rank() const { return groups_.coord().tp; }
  bool pipelined() const { return groups_.pp() != nullptr; }
  bool runs_head() const { return stage_.has_head; }  // after keep_pipeline_stage: the last (or only) stage
  bool distributed() const { return groups_.distributed(); }
  int64_t zero() const { return zero_; }
  // Whether ZeRO splits the optimizer state over the dp group (each rank holds its owned share).
  bool shards_optimizer_state() const { return zero_active(); }
  // After attach: the parameters this rank holds, frozen ones included, in registration order.
  const std::vector<NamedTensor>& weights() const { return named_; }
  // Whether parameter `name` counts as this rank's stage's (in the global gradient norm, in a ZeRO-3
  // checkpoint): the tied embedding's copy on the last stage does not (the first stage's does).
  bool stage_counts(const std::string& name) const;
  std::string describe() const;  // for the log

  // Where the model is built and its whole weights loaded: the run's device, or the host under
  // ZeRO-3 (attach moves only this rank's shards to the device).
  torch::Device build_device() const;

  // After the model is built and its whole weights loaded, in this order (parallel/parallelize.h):
  // tensor parallelism (parallel.tp > 1) keeps this rank's shard of each split layer; the pipeline
  // stage (parallel.pp > 1) this rank's blocks; expert parallelism (parallel.ep > 1) this rank's
  // experts (the others' parameters become empty tensors). Each is a no-op at degree 1.
  void split_tensors(Gpt& model);
  void keep_pipeline_stage(Gpt& model);
  void keep_experts(Gpt& model);
  // The parameters this rank holds (its pipeline stage's, its experts), in the given order.
  std::vector<NamedTensor> held(std::vector<NamedTensor> named) const;
  // How each parameter is split over the tp group (empty when tp = 1).
  const std::vector<TensorShard>& tensor_split() const { return split_; }

  // Data parallelism, after the above: the dp group's first rank's weights go to its other
  // ranks, gradient hooks are installed and ZeRO ownership is decided; under ZeRO-3 the model's
  // weights become this rank's shards (weights() then names them).
  void attach(Gpt& model, const std::vector<NamedTensor>& named_params);
  // ZeRO-3's shards of the model; null otherwise.
  FullyShardedModel* fully_sharded() const { return fully_sharded_.get(); }

  // The optimizer's groups cut down to the parameters this rank updates (its stage's; ZeRO: its
  // share; ZeRO-3: every parameter's shard in its place).
  std::vector<ParamGroup> owned_groups(std::vector<ParamGroup> groups) const;
  // Saved optimizer state cut down the same way (a checkpoint holds all of it; ZeRO-3: this rank's
  // rows of each tensor of `optimizer`'s state that follows its parameter's rows).
  std::map<std::string, torch::Tensor> owned_state(std::map<std::string, torch::Tensor> state,
                                                   const Optimizer& optimizer) const;

  // The step's target-token count over every rank, for normalizing the loss.
  int64_t global_targets(int64_t local_targets);
  // Called before each micro-batch's backward with whether it is the last (the gradient buckets
  // start their reductions during the last one); empty when no gradients are reduced.
  std::function<void(bool last)> backward_hook();
  // Data-parallel replicas of the model (the dp degree).
  int64_t replicas() const { return groups_.dp() ? groups_.dp()->size() : 1; }
  // pp > 1: how many micro-batches a step of `micro_batches` runs through the stages (parallel.pp_microbatches).
  int64_t pipeline_micro_batches(int64_t micro_batches) const;
  // pp > 1: forward and backward of the step's micro-batches through the stages (re-cut to
  // parallel.pp_microbatches), gradients accumulated. Returns this rank's share of the step's mean
  // loss (the last stage's; zero elsewhere): summed by sum_loss_and_any.
  torch::Tensor pipeline_step(Gpt& model, const std::vector<Batch>& micro, const Precision& precision,
                              int64_t global_targets);
  // Waits for the gradient reductions; sums the tied embedding's over the pipeline's ends.
  void finish_backward();
  // pp > 1: the eval batches' mean loss through the stages (every replica evaluates the same batches).
  double pipeline_evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision& precision);
  // The loss summed over ranks (each rank's is already divided by the global count, so this is the
  // global mean), and whether any rank raised `flag` (a stop signal): one all-reduce for both.
  std::pair<torch::Tensor, bool> sum_loss_and_any(const torch::Tensor& loss, bool flag);
  // An fp16 overflow anywhere skips the step everywhere. Ranks disagree only when they hold
  // different gradients (ZeRO-2's shards, tensor-parallel shards), so only then does this all-reduce.
  bool overflow_on_any_rank(bool local_overflow);
  // Global gradient norm and clipping over every parameter of the model, each
  // value counted once (ZeRO-2 and tensor-parallel shards summed over their groups).
  // `fold`: hand the clipping coefficient back instead of scaling (optim/grad_clip.h).
  torch::Tensor clip_grad_norm(double max_norm, torch::Tensor* fold = nullptr);
  void after_optimizer_step();  // ZeRO: owners broadcast their updated parameters

  // Per rank: MiB of weights, gradients (as last reduced) and optimizer state;
  // with a pipeline also the micro-batches held and the memory they took at the last step's peak.
  // A collective: every rank calls it.
  std::vector<RankMemory> memory_per_rank(const Optimizer& optimizer);
  // The last step's gradient reductions: when each bucket started, against backward's end
  // (communication overlapping compute); none without data parallelism.
  std::optional<GradSyncTimes> grad_sync_times() const;
  // ZeRO-3's gathers and reductions so far; none without it.
  std::optional<ShardTraffic> shard_traffic() const;
  // The pipeline's stages, schedule, micro-batches and bubble; none without a pipeline.
  std::optional<PipelineLayout> pipeline_layout() const;

 private:
  bool zero_active() const { return zero_ > 0 && groups_.dp() != nullptr; }
  bool fully_shards() const { return zero_ == 3 && groups_.dp() != nullptr; }
  // ZeRO-1 and 2: whole parameters owned by one rank each (ZeRO-3 shards every one instead).
  bool owns_whole_parameters() const { return zero_active() && !fully_sharded_; }
  // Parameters kept equal over a group of ranks: their gradients are summed
  // there and ZeRO splits their ownership there. The dense parameters' group
  // is the dp group; under expert parallelism each expert's is its holders.
  struct Replicas {
    Communicator* group = nullptr;    // null: this rank is their only holder
    std::vector<NamedTensor> params;  // trainable, in gradient order
    std::vector<int> owners;          // ZeRO: the group rank that updates params[i]
    std::unique_ptr<GradientSync> sync;
  };
  // Which of params_ tensor parallelism splits (sharded_) and which are experts (expert_).
  void mark_split_and_experts();
  // Rank 0 of r.group's weights (`named`, frozen ones included) to the group, ZeRO ownership, gradient hooks.
  void replicate(Replicas& r, const std::vector<NamedTensor>& named);
  // The parameters this rank updates: ZeRO's owned share (of its stage's), or
  // its stage's under a pipeline; null when it updates the whole model it has.
  const std::set<std::string>* updated_names() const {
    return owns_whole_parameters() ? &owned_ : holds_part() ? &held_ : nullptr;
  }
  // Whether this rank holds only some of the model's parameters (held_ names them).
  bool holds_part() const { return groups_.pp() || groups_.ep(); }
  // Whether parameter `name` is an expert that expert parallelism splits (its replicas share it, not the dp group).
  bool split_expert(const std::string& name) const;
  // Whether ranks of one dp group hold different gradients (so norms and overflow need the world).
  bool ranks_differ() const { return zero_ >= 2 || groups_.tp() || groups_.pp() || groups_.ep(); }

  ProcessGroups groups_;
  torch::Device device_;  // the run's: where training computes
  int64_t zero_;
  bool reshard_after_forward_;
  bool gather_bf16_;     // parallel.gather_dtype resolved to bf16
  bool offload_params_;  // ZeRO-3 on CUDA: the shards on the host (parallel.offload_params)
  ShardBlocks shard_blocks_;
  double bucket_mb_;
  std::vector<TensorShard> split_;
  PipelineSchedule schedule_;
  int64_t pp_microbatches_;
  std::vector<StageLayers> stages_;               // every pipeline stage's layers
  StageLayers stage_;                             // this rank's (all layers when pp = 1)
  std::set<std::string> held_;                    // pp or ep > 1: the names of the parameters this rank holds
  int64_t first_expert_ = 0, local_experts_ = 0;  // ep > 1: this rank's experts of each mixture layer
  torch::Tensor tied_weight_;                     // pp > 1 with tied embeddings: the stage's wte (first and last stage)
  PipelineStepStats pipeline_stats_;              // the last step's
  int64_t micro_batches_ = 0;                     // the last step's, through the pipeline
  std::vector<NamedTensor> named_;                // registration order (checkpoints)
  std::vector<NamedTensor> params_;               // gradient order
  std::vector<char> sharded_;                     // params_[i] is split over the tp group
  std::vector<char> expert_;                      // ep > 1: params_[i] is one of this rank's experts
  std::set<std::string> owned_;                   // ZeRO: names of the parameters this rank updates
  Replicas dense_;                                // over the dp group (all parameters but ep > 1's experts)
  Replicas experts_;                              // ep > 1: this rank's experts, over the expert replicas
  int64_t grad_bytes_ = 0;                        // gradients this rank held after the last reduction
  std::shared_ptr<FullyShardedModel> fully_sharded_;  // ZeRO-3 (also the model's unit hooks)
};

}  // namespace gputrain
