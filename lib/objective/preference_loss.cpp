#include "objective/preference_loss.h"

#include "model/cross_entropy.h"
#include "util/ignore_index.h"

namespace gputrain {

torch::Tensor summed_logps(const torch::Tensor& logits, const torch::Tensor& targets) {
  // Row by row through the training loss's own cross-entropy (fp32 whatever the logits' dtype); a
  // shared prompt's targets are twice the logits' rows (row r reads logits row r mod their count).
  // Only the positions that hold a target: a prompt's positions (and a shared prompt's other
  // completion) cost no log-softmax over the vocabulary.
  std::vector<torch::Tensor> rows;
  rows.reserve(static_cast<size_t>(targets.size(0)));
  for (int64_t r = 0; r < targets.size(0); ++r) {
    const torch::Tensor at = (targets[r] != kIgnoreIndex).nonzero().squeeze(1);
    rows.push_back(-cross_entropy_sum(logits[r % logits.size(0)].index_select(0, at), targets[r].index_select(0, at),
                                      kIgnoreIndex));
  }
  return torch::stack(rows);
}

RowLogps row_logps(Gpt& model, const Batch& b) {
  RowLogps out;
  out.logits = model->forward(b.input, b.token_layout);
  const torch::Tensor targets = b.target.to(out.logits.device());
  out.sums = summed_logps(out.logits, targets);
  out.completion_tokens = (targets != kIgnoreIndex).sum(1).to(torch::kFloat);
  return out;
}

const std::vector<std::string>& reward_metric_names() {
  static const std::vector<std::string> names = {"rewards/chosen",  "rewards/rejected", "rewards/accuracies",
                                                 "rewards/margins", "logps/chosen",     "logps/rejected"};
  return names;
}

void add_reward_metrics(const Batch& b, const torch::Tensor& chosen_rewards, const torch::Tensor& rejected_rewards,
                        const torch::Tensor& chosen_logps, const torch::Tensor& rejected_logps) {
  if (!b.metric_sums.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor c = chosen_rewards.detach().to(torch::kDouble), r = rejected_rewards.detach().to(torch::kDouble);
  const torch::Tensor sums =
      torch::stack({c.sum(), r.sum(), (c > r).to(torch::kDouble).sum(), (c - r).sum(),
                    chosen_logps.detach().to(torch::kDouble).sum(), rejected_logps.detach().to(torch::kDouble).sum()});
  b.metric_sums.narrow(0, 0, 6).add_(sums.to(b.metric_sums.device()));
}

torch::Tensor chosen_sequence_targets(const Batch& b) {
  const torch::Tensor x = chosen_half(b.input, b.pairs);
  const int64_t T = x.size(1);
  const torch::Tensor next = torch::cat({x.narrow(1, 1, T - 1), torch::zeros({x.size(0), 1}, x.options())}, 1);
  const torch::Tensor position = torch::arange(T, x.options()).unsqueeze(0);
  const torch::Tensor real = position + 1 < chosen_half(b.lengths, b.pairs).to(x.device()).unsqueeze(1);
  return torch::where(real, next, torch::full_like(next, kIgnoreIndex));
}

int64_t target_tokens(const torch::Tensor& targets) { return (targets != kIgnoreIndex).sum().item<int64_t>(); }

torch::Tensor weighted_chosen_nll(const Batch& b, const torch::Tensor& logits, const torch::Tensor& targets) {
  const torch::Tensor chosen = chosen_half(logits, b.pairs);
  const torch::Tensor nll =
      cross_entropy_sum(chosen.reshape({-1, chosen.size(-1)}), targets.reshape({-1}), kIgnoreIndex);
  return nll * b.second_unit_weight;
}

}  // namespace gputrain
