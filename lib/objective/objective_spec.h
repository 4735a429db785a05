// One training objective as the step knows it, declared in the objective's own file (causal_lm.cpp,
// ...) and registered by one line in objective/objectives.cpp. The step (train/forward_backward.h),
// the pipeline's last stage (parallel/pipeline.h), the captured step graph and evaluation all take a
// micro-batch's loss from here, and check the batch carries the fields the objective declares. Its
// key (train.objective) is typed in config/settings.h and described in config/schema.cpp.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "data/loader.h"
#include "model/gpt.h"

namespace gputrain {

// A Batch member an objective reads.
enum class BatchField { kInput, kTarget, kDocuments };

struct ObjectiveSpec {
  TrainObjective name;  // train.objective's typed value (the schema spells it)
  std::string summary;  // what it minimizes, for the docs
  // The fields every micro-batch must carry (Batch::token_layout is optional for every objective: a
  // packed batch's layout, used where present).
  std::vector<BatchField> fields;
  // How many units the micro-batch's loss is a sum over (next-token: the targets that take loss). A
  // step divides the sum of its micro-batches' losses by their units over every replica: the one
  // normalization, whatever the split into micro-batches and ranks (objective/objectives.h).
  std::function<int64_t(const Batch&)> units;
  // The micro-batch's summed loss through the whole model (gradients flow from it).
  std::function<torch::Tensor(Gpt& model, const Batch& b)> loss_sum;
  // The same from the last block's residual stream [B, T, d_model]: a pipeline's last stage.
  std::function<torch::Tensor(Gpt& model, const torch::Tensor& stream, const Batch& b)> stream_loss_sum;
};

}  // namespace gputrain
