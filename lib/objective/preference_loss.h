// What DPO, ORPO and SimPO share (objective/dpo.cpp, orpo.cpp, simpo.cpp): each row's
// log-probability of its completion from one forward of a preference batch's 2P rows (chosen rows
// first: data/preference_pairs.h), and TRL's metrics of the pairs' rewards.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objective_spec.h"

namespace gputrain {

// Each target row's summed log-probability of its targets (the completion), [2P] float32 with
// gradients, from one forward of b's rows with the output head at target positions alone (a shared
// prompt's P rows give 2P target rows: data/preference_pairs.h); `completion_tokens` [2P] float32.
// `chosen_targets` (optional, [P, T] over the chosen rows): their summed next-token loss as well.
struct RowLogps {
  torch::Tensor sums;
  torch::Tensor completion_tokens;
  torch::Tensor chosen_nll;  // undefined without chosen_targets
  // The mean log-probability per completion token (ORPO's and SimPO's "average_log_prob").
  torch::Tensor per_token() const { return sums / completion_tokens.clamp_min(1); }
};
RowLogps row_logps(Gpt& model, const Batch& b, const torch::Tensor& chosen_targets = {});
// The same from the last block's stream [rows, T, d_model] (a pipeline's last stage).
RowLogps stream_row_logps(Gpt& model, const torch::Tensor& stream, const Batch& b,
                          const torch::Tensor& chosen_targets = {});

// A preference objective's loss sum of the policy's row log-probabilities.
using PreferenceLossOf = std::function<torch::Tensor(const Batch& b, const RowLogps& policy)>;
// Sets spec.loss_sum (a whole forward) and spec.stream_loss_sum (a pipeline's last stage) to `loss`,
// and spec.whole_sequence_loss. `chosen_sequences`: the loss also reads the chosen sequences' summed
// next-token loss (ORPO's RowLogps::chosen_nll), their targets set by spec.prepare (Batch::chosen_targets).
void set_preference_loss(ObjectiveSpec& spec, PreferenceLossOf loss, bool chosen_sequences = false);

// The chosen (first P) and rejected (last P) halves of a [2P] tensor.
inline torch::Tensor chosen_half(const torch::Tensor& t, int64_t pairs) { return t.narrow(0, 0, pairs); }
inline torch::Tensor rejected_half(const torch::Tensor& t, int64_t pairs) { return t.narrow(0, pairs, pairs); }

// TRL's six names, the metrics every preference objective reports per pair.
const std::vector<std::string>& reward_metric_names();
// Adds to b.metric_sums (where the step made one) the sums over b's pairs of: chosen and rejected
// rewards, whether chosen's is higher, their margin, and the chosen and rejected log-probabilities
// as the objective defines them (summed or per token).
void add_reward_metrics(const Batch& b, const torch::Tensor& chosen_rewards, const torch::Tensor& rejected_rewards,
                        const torch::Tensor& chosen_logps, const torch::Tensor& rejected_logps);

// Whole-sequence targets of the chosen sequences (every real token after the first), [P, T] over their
// input rows (Batch::target_rows).
torch::Tensor chosen_sequence_targets(const Batch& b);
// Batch::chosen_targets where the step prepared `b` (ObjectiveSpec::prepare), else computed here (a
// unit test's batch).
torch::Tensor chosen_targets_of(const Batch& b);
// How many targets a [rows, T] targets tensor holds (the second units of ORPO and SimPO).
int64_t target_tokens(const torch::Tensor& targets);

}  // namespace gputrain
