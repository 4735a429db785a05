// A checkpoint's whole weights and optimizer state (checkpoint/training_checkpoint.h: every rank's
// files joined) cut to what one rank of a parallelized model holds: its tensor-parallel shard of each
// split parameter, its pipeline stage's and experts' parameters only, its ZeRO-3 rows, its ZeRO share
// of the state. Resume and spike rollback both load through these, so every grid that resumes can
// roll back.
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/training_checkpoint.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/gradient_reducer.h"
#include "parallel/process_groups.h"
#include "parallel/rank_share.h"
#include "util/named_tensor.h"

namespace gputrain {

// Copies `whole` into the parameters this rank holds after parallelize (parallel/parallelize.h), in
// place. Every held parameter `covers` accepts must be there with its whole shape and no name may be
// foreign to the model, else a DataError naming `source`, the first names and `fix`; nothing is
// copied then (ZeRO-3: its shapes are checked as each is copied).
void load_rank_weights(Gpt& model, const ProcessGroups& groups, const RankShare& share,
                       const std::vector<NamedTensor>& whole, const std::string& source, const std::string& fix,
                       const std::function<bool(const std::string&)>& covers = {});

// Whether rank_optimizer_state needs the snapshot's whole model (the state was saved under another parallel.tp).
bool reshards_over_tp(const TrainingSnapshot& snap, const ProcessGroups& groups);

// The snapshot's optimizer state for `optimizer` on this rank: its tp rank's (resharded when the
// checkpoint was saved under another parallel.tp), cut to what it updates (GradientReducer::owned_state).
// Reads snap.model (the whole weights) to reshard: call it before freeing them.
std::map<std::string, torch::Tensor> rank_optimizer_state(const TrainingSnapshot& snap, const ProcessGroups& groups,
                                                          const GradientReducer& gradients, const RankShare& share,
                                                          const Optimizer& optimizer, const std::string& checkpoint);

}  // namespace gputrain
