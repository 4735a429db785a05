// Forward and backward over the micro-batches of one optimizer step.
#pragma once
#include <torch/types.h>

#include <vector>

#include "data/loader.h"
#include "model/gpt.h"

namespace gputrain {

// Accumulates into the parameters' .grad the gradient of
//   sum over all micro-batches of the per-token losses / (target tokens in all micro-batches),
// i.e. the loss is normalized by the step's total token count, not averaged
// per micro-batch, so k micro-batches of b give the gradient of one batch of
// k*b even when micro-batches hold different numbers of targets.
// Returns that mean loss (a detached 0-dim tensor, not synced to the host).
torch::Tensor accumulate_gradients(Gpt& model, const std::vector<Batch>& micro_batches);

// Mean per-token loss over `batches`, without gradients, in eval mode.
double evaluate(Gpt& model, const std::vector<Batch>& batches);

}  // namespace gputrain
