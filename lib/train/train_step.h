// Forward and backward over the micro-batches of one optimizer step.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "precision/precision.h"

namespace gputrain {

class ParallelRun;

// Accumulates into the parameters' .grad the gradient of
//   sum over all micro-batches of the per-token losses / (target tokens in all micro-batches),
// i.e. the loss is normalized by the step's total token count, not averaged
// per micro-batch, so k micro-batches of b give the gradient of one batch of
// k*b even when micro-batches hold different numbers of targets.
// Returns that mean loss (a detached 0-dim tensor, not synced to the host).
// With `precision`, forward passes run under its autocast and backward on
// its scaled loss (gradients are then still scaled: see Precision).
//
// Data parallelism (parallel/) needs two things from outside:
struct AccumulateOptions {
  // The normalizer: 0 = these micro-batches' own target count; data parallel
  // passes the count over every rank's micro-batches, so summing the ranks'
  // gradients gives the gradient of the global batch's mean loss.
  int64_t total_targets = 0;
  // Called before each micro-batch's backward with whether it is the last.
  std::function<void(bool last)> before_backward;
  // 1 / the normalizer as a 0-dim float32 tensor on the model's device, read
  // by the kernels instead of baked into them as a constant: a captured CUDA
  // graph (train/step_graph.h) refills it every step. Overrides total_targets.
  torch::Tensor inv_total;
};
// 1 / the targets a step's loss is normalized by: total_targets, or where it
// is 0 the micro-batches' own count. An error when there are none.
double inverse_target_count(const std::vector<Batch>& micro_batches, int64_t total_targets);

torch::Tensor accumulate_gradients(Gpt& model, const std::vector<Batch>& micro_batches,
                                   const Precision* precision = nullptr, const AccumulateOptions& options = {});

// Mean per-token loss over `batches`, without gradients, in eval mode.
double evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision* precision = nullptr);

// A training step's forward and backward on this rank, gradients accumulated: over its model
// (accumulate_gradients, the gradient buckets' hook before each backward) or through the
// pipeline's stages (pp > 1). The mixture layers' balancing loss is weighted for the step's
// forwards on every replica. Returns this rank's share of the step's mean loss.
torch::Tensor forward_backward(ParallelRun& par, Gpt& model, const std::vector<Batch>& micro,
                               const Precision& precision, int64_t global_targets);
// The eval batches' mean loss, on this rank's model or through the pipeline.
double evaluate(ParallelRun& par, Gpt& model, const std::vector<Batch>& batches, const Precision& precision);

}  // namespace gputrain
