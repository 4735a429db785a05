// Forward and backward over the micro-batches of one optimizer step.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objectives.h"
#include "precision/precision.h"

namespace gputrain {

// Accumulates into the parameters' .grad the gradient of
//   sum over all micro-batches of the objective's losses / (its units in all micro-batches),
// the step's one normalization (objective/objectives.h inverse_unit_count; next-token: per target). The trainer's steps
// go through train/forward_backward.h, which picks this, the pipeline or the captured graph. Returns that mean loss (a
// detached 0-dim tensor, not synced to the host). With `precision`, forward passes run under its autocast and backward
// on its scaled loss (gradients are then still scaled: see Precision).
//
// Data parallelism (parallel/) needs two things from outside:
struct AccumulateOptions {
  // The normalizer: 0 = these micro-batches' own unit count; data parallel
  // passes the count over every rank's micro-batches, so summing the ranks'
  // gradients gives the gradient of the global batch's mean loss.
  int64_t total_targets = 0;
  // Called before each micro-batch's backward with whether it is the last.
  std::function<void(bool last)> before_backward;
  // 1 / the normalizer as a 0-dim float32 tensor on the model's device, read
  // by the kernels instead of baked into them as a constant: a captured CUDA
  // graph (train/step_graph.h) refills it every step. Overrides total_targets.
  torch::Tensor inv_total;
  // train.objective's spec: what a micro-batch's loss is.
  const ObjectiveSpec* objective = &default_objective();
};

torch::Tensor accumulate_gradients(Gpt& model, const std::vector<Batch>& micro_batches,
                                   const Precision* precision = nullptr, const AccumulateOptions& options = {});

// The objective's summed loss over `batches` and their units (next-token: targets), without
// gradients, in eval mode.
struct LossSum {
  double loss = 0;
  int64_t targets = 0;
};
LossSum evaluate_sum(Gpt& model, const std::vector<Batch>& batches, const Precision* precision = nullptr,
                     const ObjectiveSpec& objective = default_objective());
// Their mean loss per unit.
double evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision* precision = nullptr,
                const ObjectiveSpec& objective = default_objective());

}  // namespace gputrain
