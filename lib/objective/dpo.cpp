#include "objective/dpo.h"

#include "objective/preference_loss.h"

namespace gputrain {

namespace {

// TRL DPOTrainer's per-pair losses of the log-ratio margin (loss_type sigmoid, ipo, hinge, robust).
torch::Tensor dpo_losses(const PreferenceSettings& p, const torch::Tensor& chosen_ratios,
                         const torch::Tensor& rejected_ratios, const torch::Tensor& chosen_tokens,
                         const torch::Tensor& rejected_tokens) {
  const torch::Tensor margin = p.beta * (chosen_ratios - rejected_ratios);
  switch (p.loss) {
    case PreferenceLoss::kSigmoid:
      return -torch::log_sigmoid(margin);
    case PreferenceLoss::kHinge:
      return torch::relu(1 - margin);
    case PreferenceLoss::kIpo: {  // per completion token, as TRL (and the IPO authors' results)
      const torch::Tensor delta =
          chosen_ratios / chosen_tokens.clamp_min(1) - rejected_ratios / rejected_tokens.clamp_min(1);
      return (delta - 1 / (2 * p.beta)).pow(2);
    }
    case PreferenceLoss::kRobust: {
      const double e = p.label_smoothing;
      return (-(1 - e) * torch::log_sigmoid(margin) + e * torch::log_sigmoid(-margin)) / (1 - 2 * e);
    }
  }
  return {};
}

}  // namespace

ObjectiveSpec dpo_objective(const PreferenceSettings& p) {
  ObjectiveSpec spec{
      TrainObjective::kDpo,
      "DPO (Rafailov et al. 2023): -log sigmoid(beta x the margin of the completions' log-ratios to the reference "
      "model), or train.preference.loss's ipo, hinge or robust form; the mean over the step's pairs",
      {BatchField::kPairs, BatchField::kTarget, BatchField::kReference},
      2,
      [](const Batch& b) { return b.pairs; },
      nullptr,  // loss_sum and stream_loss_sum: set_preference_loss, below
      nullptr,
      {"train.preference.beta", "train.preference.loss", "train.preference.label_smoothing",
       "train.preference.reference"},
      [](const TrainSettings& t) { return dpo_objective(t.preference); },
      nullptr,
      reward_metric_names(),
      [](const TrainSettings& t) {
        std::vector<OptimizerProblem> problems;
        if (t.preference.label_smoothing > 0 && t.preference.loss != PreferenceLoss::kRobust)
          problems.push_back({"train.preference.label_smoothing",
                              "has no effect with DPO's sigmoid, ipo and hinge losses: only robust reads it",
                              "set train.preference.loss: robust, or remove label_smoothing", true});
        return problems;
      },
  };
  set_preference_loss(spec, [p](const Batch& b, const RowLogps& policy) {
    const torch::Tensor ratios = policy.sums - b.reference_logps.to(policy.sums.device());
    const int64_t P = b.pairs;
    const torch::Tensor chosen = chosen_half(ratios, P), rejected = rejected_half(ratios, P);
    add_reward_metrics(b, p.beta * chosen, p.beta * rejected, chosen_half(policy.sums, P),
                       rejected_half(policy.sums, P));
    return dpo_losses(p, chosen, rejected, chosen_half(policy.completion_tokens, P),
                      rejected_half(policy.completion_tokens, P))
        .sum();
  });
  return spec;
}

const ObjectiveSpec& dpo_spec() {
  static const ObjectiveSpec spec = dpo_objective(PreferenceSettings{});
  return spec;
}

}  // namespace gputrain
