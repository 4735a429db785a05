// One training objective as the step knows it, declared in the objective's own file (causal_lm.cpp,
// ...) and registered by one line in objective/objectives.cpp. The step (train/forward_backward.h),
// the pipeline's last stage (parallel/pipeline.h), the captured step graph and evaluation all take a
// micro-batch's loss from here, and check the batch carries the fields the objective declares. Its
// key (train.objective) is typed in config/settings.h and described in config/schema.cpp.
#pragma once
#include <torch/types.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "config/recipe_rules.h"
#include "config/settings.h"
#include "data/loader.h"
#include "model/gpt.h"

namespace gputrain {

// A Batch member an objective reads. kPairs: preference pairs (Batch::pairs, lengths);
// kReference: the reference model's log-probabilities (filled before the forward: train/reference_model.h).
enum class BatchField { kInput, kTarget, kDocuments, kPairs, kReference };

struct ObjectiveSpec {
  TrainObjective name;  // train.objective's typed value (the schema spells it)
  std::string summary;  // what it minimizes, for the docs
  // The fields every micro-batch must carry (Batch::token_layout is optional for every objective: a
  // packed batch's layout, used where present).
  std::vector<BatchField> fields;
  // Rows of model.seq_len one sample of train.per_device_batch_size takes (a preference pair: 2).
  int64_t rows_per_sample = 1;
  // How many units the micro-batch's loss is a sum over (next-token: the targets that take loss). A
  // step divides the sum of its micro-batches' losses by their units over every replica: the one
  // normalization, whatever the split into micro-batches and ranks (objective/objectives.h).
  std::function<int64_t(const Batch&)> units;
  // The micro-batch's summed loss through the whole model (gradients flow from it).
  std::function<torch::Tensor(Gpt& model, const Batch& b)> loss_sum;
  // The same from the last block's residual stream [B, T, d_model]: a pipeline's last stage (null:
  // the objective does not run under a pipeline yet).
  std::function<torch::Tensor(Gpt& model, const torch::Tensor& stream, const Batch& b)> stream_loss_sum;

  // The train.* keys only this objective reads ("train.preference.beta"; a prefix ends with '.'):
  // one set for another objective is a recipe error (config/recipe_rules.h ObjectiveRules).
  std::vector<std::string> keys;
  // The spec as the recipe's settings make it (train.preference's beta...); null: no settings.
  std::function<ObjectiveSpec(const TrainSettings&)> with_settings;
  // A second term's units (ORPO's NLL: chosen tokens), counted over the step like `units`; the step
  // hands loss_sum their ratio (Batch::second_unit_weight). Null: one term.
  std::function<int64_t(const Batch&)> second_units;
  // Metrics per unit the loss adds up into Batch::metric_sums (TRL's "rewards/chosen", ...): the
  // step sums them over micro-batches and replicas and divides by the units.
  std::vector<std::string> metric_names;
  // The objective's own recipe checks beyond the keys it reads (null: none).
  std::function<std::vector<OptimizerProblem>(const TrainSettings&)> check;
  // What the objective computes from each whole micro-batch before a step or evaluation reads it
  // (context parallelism then splits it: ORPO's chosen-sequence targets); null: nothing.
  std::function<void(Batch&)> prepare;
  // Whether the loss is a nonlinearity of each sequence's whole sums (the preference objectives,
  // through Gpt::whole_sequence_sums): under context parallelism every rank of a cp group then holds
  // the whole micro-batch's loss, not its chunks' share.
  bool whole_sequence_loss = false;

  // Whether every micro-batch must carry `f` (one of `fields`).
  bool reads(BatchField f) const { return std::find(fields.begin(), fields.end(), f) != fields.end(); }
};

}  // namespace gputrain
