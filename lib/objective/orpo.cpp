#include "objective/orpo.h"

#include "objective/preference_loss.h"

namespace gputrain {

namespace {

// log(1 - exp(x)) for x < 0, split at -ln 2 against cancellation (as TRL's log1mexp).
torch::Tensor log1mexp(const torch::Tensor& x) {
  return torch::where(x < -0.6931471805599453, torch::log1p(-torch::exp(x)), torch::log(-torch::expm1(x)));
}

}  // namespace

ObjectiveSpec orpo_objective(const PreferenceSettings& p) {
  ObjectiveSpec spec{
      TrainObjective::kOrpo,
      "ORPO (Hong et al. 2024): the chosen sequences' next-token loss (a mean over their tokens, prompt included, "
      "as TRL) minus beta x the mean log sigmoid of the log odds ratio of the completions' per-token "
      "probabilities; no reference model",
      {BatchField::kPairs, BatchField::kTarget},
      2,
      [](const Batch& b) { return b.pairs; },
      nullptr,  // loss_sum and stream_loss_sum: set_preference_loss, below
      nullptr,
      {"train.preference.beta"},
      [](const TrainSettings& t) { return orpo_objective(t.preference); },
      [](const Batch& b) { return target_tokens(chosen_targets_of(b)); },
      reward_metric_names(),
  };
  set_preference_loss(
      spec,
      [p](const Batch& b, const RowLogps& policy) {
        const int64_t P = b.pairs;
        const torch::Tensor mean_logps = policy.per_token();
        const torch::Tensor chosen = chosen_half(mean_logps, P), rejected = rejected_half(mean_logps, P);
        const torch::Tensor log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected));
        add_reward_metrics(b, p.beta * chosen, p.beta * rejected, chosen, rejected);
        return policy.chosen_nll * b.second_unit_weight - p.beta * torch::log_sigmoid(log_odds).sum();
      },
      /*chosen_sequences=*/true);
  return spec;
}

const ObjectiveSpec& orpo_spec() {
  static const ObjectiveSpec spec = orpo_objective(PreferenceSettings{});
  return spec;
}

}  // namespace gputrain
