// bf16 mixed precision's weight copies, set up from outside the model
// (model/weight_copy.h says what the model does with them).
//
// Where precision.mode is bf16 and the optimizer writes bf16 copies in its
// update pass (fused AdamW, on CUDA or the CPU), every Linear weight that it
// updates, and the tied output head's embedding, gets a bf16 copy that the
// optimizer keeps equal to the fp32 weight rounded to nearest. That is exactly
// autocast's cast of the weight, so training computes the same numbers,
// bit for bit, without the casts.
//
// Nothing else may change those weights, or the copies would go stale: they
// are made from the weights as they are here (initialized, loaded, broadcast
// to the replicas), and only weights this process's optimizer updates get one.
// So none are made under parallel.offload_optimizer (the update runs on host
// copies), and under ZeRO a rank keeps copies of the parameters it owns only
// (the others arrive by broadcast and keep autocast's cast).
#pragma once
#include <cstdint>

#include "model/gpt.h"
#include "optim/optimizer.h"
#include "precision/precision.h"

namespace gputrain {

struct WeightCopies {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Makes the copies where they apply (see above); returns what was made.
// runs_head: whether this process computes the output head (false on a pipeline
// stage other than the last, which holds a tied embedding only to embed).
WeightCopies attach_weight_copies(Gpt& model, Optimizer& optimizer, const Precision& precision, bool runs_head = true);

// Sets every copy from its weight again, after something other than the optimizer changed the
// weights (a rollback to a checkpoint, train/spike_guard.h).
void refresh_weight_copies(Gpt& model);

}  // namespace gputrain
