#include "objective/simpo.h"

#include "objective/preference_loss.h"

namespace gputrain {

ObjectiveSpec simpo_objective(const PreferenceSettings& p) {
  ObjectiveSpec spec{
      TrainObjective::kSimpo,
      "SimPO (Meng et al. 2024): -log sigmoid(beta x (the margin of the completions' per-token log-probabilities) - "
      "gamma), label-smoothed; plus sft_weight x the chosen completions' next-token loss (TRL CPO's cpo_alpha); no "
      "reference model",
      {BatchField::kPairs, BatchField::kTarget},
      2,
      [](const Batch& b) { return b.pairs; },
      nullptr,  // loss_sum and stream_loss_sum: set_preference_loss, below
      nullptr,
      {"train.preference.beta", "train.preference.simpo_gamma", "train.preference.label_smoothing",
       "train.preference.sft_weight"},
      [](const TrainSettings& t) { return simpo_objective(t.preference); },
      [](const Batch& b) { return b.pairs > 0 ? target_tokens(chosen_half(b.target, b.pairs)) : int64_t{0}; },
      reward_metric_names(),
  };
  set_preference_loss(spec, [p](const Batch& b, const RowLogps& policy) {
    const int64_t P = b.pairs;
    const torch::Tensor mean_logps = policy.per_token();
    const torch::Tensor chosen = chosen_half(mean_logps, P), rejected = rejected_half(mean_logps, P);
    const torch::Tensor margin = p.beta * (chosen - rejected) - p.simpo_gamma;
    const double e = p.label_smoothing;
    torch::Tensor loss = (-(1 - e) * torch::log_sigmoid(margin) - e * torch::log_sigmoid(-margin)).sum();
    add_reward_metrics(b, p.beta * chosen, p.beta * rejected, chosen, rejected);
    // The chosen completions' next-token loss: their log-probabilities' sum, as a mean over the step's tokens.
    if (p.sft_weight > 0) loss = loss - p.sft_weight * b.second_unit_weight * chosen_half(policy.sums, P).sum();
    return loss;
  });
  return spec;
}

const ObjectiveSpec& simpo_spec() {
  static const ObjectiveSpec spec = simpo_objective(PreferenceSettings{});
  return spec;
}

}  // namespace gputrain
