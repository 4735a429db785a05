// What the training loop asks of parallelism, in one place: the world, data
// parallelism (GradientSync), ZeRO's ownership of parameters, and gathering
// sharded optimizer state into a checkpoint. A single-process run has a
// ParallelRun too; every call is then a no-op, so the loop has one shape.
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/settings.h"
#include "optim/param_groups.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "train/train_step.h"

namespace gputrain {

class Optimizer;

class ParallelRun {
 public:
  // Joins the world (for more than one process) and checks the recipe against it.
  ParallelRun(const World& world, const ParallelSettings& p, torch::Device device);
  ~ParallelRun();

  const World& world() const { return world_; }
  bool distributed() const { return comm_ != nullptr; }
  int64_t zero() const { return zero_; }
  std::string describe() const;  // for the log

  // After the model is built (and its weights loaded): rank 0's weights go to
  // every rank, gradient hooks are installed and ZeRO ownership is decided.
  void attach(const std::vector<NamedTensor>& named_params);

  // The optimizer's groups cut down to the parameters this rank updates (ZeRO), else unchanged.
  std::vector<ParamGroup> owned_groups(std::vector<ParamGroup> groups) const;
  // Saved optimizer state cut down the same way (a checkpoint holds all of it).
  std::map<std::string, torch::Tensor> owned_state(std::map<std::string, torch::Tensor> state) const;

  // The step's target-token count over every rank, for normalizing the loss.
  int64_t global_targets(int64_t local_targets);
  AccumulateOptions accumulate_options(int64_t global_targets);
  void finish_backward();  // waits for the gradient reductions
  // The loss summed over ranks (each rank's is already divided by the global count, so this is the
  // global mean), and whether any rank raised `flag` (a stop signal): one all-reduce for both.
  std::pair<torch::Tensor, bool> sum_loss_and_any(const torch::Tensor& loss, bool flag);
  // Whether `flag` is set on any rank (`what` names the all-reduce in errors).
  bool any_rank(bool flag, const std::string& what);
  // An fp16 overflow anywhere skips the step everywhere. Only ZeRO-2's ranks can disagree (each
  // checks its own shard of the gradients), so only then does this all-reduce.
  bool overflow_on_any_rank(bool local_overflow);
  // Global gradient norm and clipping (ZeRO-2: over the shards).
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);
  void after_optimizer_step();  // ZeRO: owners broadcast their updated parameters

  // Rank 0 gets every rank's optimizer state (other ranks get an empty list).
  std::vector<NamedTensor> gather_optimizer_state(const Optimizer& optimizer);
  // Per rank: MiB of weights, gradients (as last reduced) and optimizer state.
  nlohmann::ordered_json memory_per_rank(const Optimizer& optimizer);
  // The last step's gradient reductions: how many buckets started before
  // backward ended (communication overlapping compute), with timestamps.
  nlohmann::ordered_json grad_sync_report() const;

 private:
  World world_;
  int64_t zero_;
  double bucket_mb_;
  std::unique_ptr<Communicator> comm_;
  std::vector<NamedTensor> params_;  // gradient order
  std::vector<int> owners_;          // ZeRO: owner of params_[i]
  std::set<std::string> owned_;      // names of the parameters this rank updates
  std::unique_ptr<GradientSync> sync_;
  int64_t grad_bytes_ = 0;  // gradients this rank held after the last reduction
};

}  // namespace gputrain
