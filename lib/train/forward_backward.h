// A training step's forward and backward on this rank, and evaluation's forwards: the one place
// that picks how they run. Through the pipeline's stages (pp > 1, parallel/pipeline.h); else over
// the micro-batches (accumulate_gradients, train/train_step.h), captured once as a CUDA graph and
// replayed with kernels.cuda_graphs (train/step_graph.h). Every path takes a micro-batch's loss from
// train.objective's spec and normalizes it by the step's units the same way (objective/objectives.h).
// Evaluation, `gputrain eval` and the batch finder's trial steps run through here too.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objective_spec.h"
#include "precision/precision.h"
#include "train/step_graph.h"

namespace gputrain {

class GradientReducer;
class PipelineStages;
class ProcessGroups;

class ForwardBackward {
 public:
  // `pipeline`: pp > 1's stage (null without a pipeline); `graph`: kernels.cuda_graphs' step graph
  // (null: eager steps).
  // `gradients` null: no gradient reducer (evaluation alone, `gputrain eval`).
  ForwardBackward(const ProcessGroups& groups, GradientReducer* gradients, PipelineStages* pipeline, Gpt model,
                  const Precision& precision, const ObjectiveSpec& objective, std::unique_ptr<StepGraph> graph);

  const ObjectiveSpec& objective() const { return objective_; }
  // This rank's micro-batches' counts (summed over the replicas by parallel/replica_sums.h
  // global_counts); checks each carries the objective's fields.
  struct Counts {
    int64_t units = 0;    // what the step's loss is normalized by (the objective's units)
    int64_t targets = 0;  // target tokens that take loss: what the run's tokens and tokens/s count
    int64_t second = 0;   // the objective's second term's units (ObjectiveSpec::second_units), 0 without one
  };
  Counts counts(const std::vector<Batch>& micro) const;

  // The step's gradients accumulated into the parameters (the gradient buckets' hook before each
  // backward; the mixture layers' balancing loss weighted for the step's forwards on every replica).
  // Returns this rank's share of the step's mean loss over `global_units` units: under context
  // parallelism its chunks' share (sum_loss_and_any(..., per_chunk) adds the chunks up), or the
  // whole loss where the objective's is of whole sequences (ObjectiveSpec::whole_sequence_loss).
  torch::Tensor step(const std::vector<Batch>& micro, int64_t global_units);
  // One forward and backward of `b` on this rank alone, normalized by its own units, no gradient
  // hooks: the batch finder's trial of whether a micro-batch fits (train/batch_finder.h).
  void trial_step(const Batch& b);
  // Whether the last step() captured the graph (replayed from the next step on).
  bool captured_at_last_step() const { return captured_now_; }
  // Whether the gradients are the graph's outputs, kept between steps: the trainer must not free them.
  bool keeps_gradients() const { return graph_ && graph_->keeps_gradients(); }

  // Called on every batch set before its forwards (evaluation's too): what the objective needs filled
  // in beside the data (its own ObjectiveSpec::prepare, then this: DPO's reference log-probabilities,
  // train/reference_model.h).
  void set_batch_preparation(std::function<void(std::vector<Batch>&)> prepare) { prepare_ = std::move(prepare); }
  void prepare(std::vector<Batch>& batches) const {
    if (objective_.prepare)
      for (Batch& b : batches) objective_.prepare(b);
    if (prepare_) prepare_(batches);
  }

  // The batches' mean loss, on this rank's model or through the pipeline. An objective with metrics
  // (ObjectiveSpec::metric_names) adds their sums over the batches to eval_metric_sums().
  double evaluate(const std::vector<Batch>& batches);
  // The objective's metric sums of the evaluations since the last take (float64, on the host; empty
  // without metrics): this rank's batches only.
  std::vector<double> take_eval_metric_sums();
  // Batch `b`'s summed loss (its mean times its objective units): what whole-set evaluation adds up.
  double loss_sum(const Batch& b) { return evaluate({b}) * static_cast<double>(objective_.units(b)); }
  // Runs f in the captured graph's memory pool, idle between replays (plain f() without one).
  void run_in_step_memory(const std::function<void()>& f);
  // summary.json's "cuda_graphs"; none without a graph.
  std::optional<nlohmann::ordered_json> graph_report() const;

 private:
  const ProcessGroups& groups_;
  GradientReducer* gradients_;
  PipelineStages* pipeline_;
  Gpt model_;
  const Precision& precision_;
  const ObjectiveSpec& objective_;
  std::unique_ptr<StepGraph> graph_;
  bool captured_now_ = false;
  std::function<void(std::vector<Batch>&)> prepare_;
  std::vector<double> eval_metric_sums_;
};

}  // namespace gputrain
