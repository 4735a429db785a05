// The one normalizer of a training step's loss: the per-token losses of all its micro-batches are
// summed and divided by the step's target count (over every rank), so k micro-batches of b give the
// gradient of one batch of k*b whatever each holds. The plain step (train/train_step.h), the
// pipeline's last stage (parallel/pipeline.h) and the captured step graph all take it from here.
#pragma once
#include <cstdint>
#include <vector>

#include "data/loader.h"

namespace gputrain {

// 1 / the targets a step's loss is normalized by: total_targets, or where it is 0 the
// micro-batches' own count. A step without targets (chat prompts only) is normalized by 1: it adds
// nothing to the gradients.
double inverse_target_count(const std::vector<Batch>& micro_batches, int64_t total_targets);

}  // namespace gputrain
