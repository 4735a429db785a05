// This rank's pipeline stage in a step (pp > 1): the step's micro-batches through the stages
// (re-cut to parallel.pp_microbatches) under parallel.pp_schedule, evaluation's batches the same
// way, and what the last step held. Built by parallelize; parallel/pipeline.h has the schedules.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "config/settings.h"
#include "data/loader.h"
#include "metrics/parallel_reports.h"
#include "model/gpt.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "precision/precision.h"

namespace gputrain {

class PipelineStages {
 public:
  // `groups` has a pp group; `stages` are every stage's layers (this rank's is the pp rank's).
  PipelineStages(const ProcessGroups& groups, const ParallelSettings& p, torch::Device device,
                 std::vector<StageLayers> stages);

  // How many micro-batches a step of `micro_batches` runs through the stages (parallel.pp_microbatches).
  int64_t micro_batches(int64_t micro_batches) const;
  // Forward and backward of the step's micro-batches, gradients accumulated (`before_backward`: the
  // gradient buckets' hook). Returns this rank's share of the step's mean loss (the last stage's;
  // zero elsewhere): summed over the world (parallel/replica_sums.h).
  torch::Tensor step(Gpt& model, const ObjectiveSpec& objective, const std::vector<Batch>& micro,
                     const Precision& precision, int64_t global_targets,
                     std::function<void(bool last)> before_backward);
  // The eval batches' mean loss (every replica evaluates the same batches).
  double evaluate(Gpt& model, const ObjectiveSpec& objective, const std::vector<Batch>& batches,
                  const Precision& precision);
  // Forward only (eval mode, no gradients) of `batches` through the stages; on the last stage
  // `at_head(stream, batch)` with its last block's stream (DPO's reference, train/reference_model.h).
  void forward_only(Gpt& model, std::vector<Batch>& batches, const Precision& precision,
                    const std::function<void(const torch::Tensor& stream, Batch& b)>& at_head) const;
  // The stages, schedule, micro-batches and bubble of the last step.
  PipelineLayout layout() const;
  // This rank's stage, micro-batches held and their memory at the last step's peak (`m` otherwise as given).
  RankMemory with_stage_memory(RankMemory m) const;

 private:
  const ProcessGroups& groups_;
  torch::Device device_;
  PipelineSchedule schedule_;
  int64_t pp_microbatches_;
  std::vector<StageLayers> stages_;
  StageLayers stage_;
  PipelineStepStats stats_;    // the last step's
  int64_t micro_batches_ = 0;  // the last step's
};

}  // namespace gputrain
