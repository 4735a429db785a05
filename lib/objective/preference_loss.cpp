#include "objective/preference_loss.h"

#include "util/ignore_index.h"

namespace gputrain {

namespace {

// Every target of `targets` [R, T] (not kIgnoreIndex): its row, its flat position in the logits'
// `rows` x T (target row r reads logits row r mod rows) and its token.
struct Picks {
  torch::Tensor row, position, token;
};
Picks pick_targets(const torch::Tensor& targets, int64_t rows) {
  const torch::Tensor at = (targets != kIgnoreIndex).nonzero();
  const torch::Tensor r = at.select(1, 0), t = at.select(1, 1);
  return {r, r.remainder(rows) * targets.size(1) + t, targets.index({r, t})};
}

}  // namespace

RowLogps row_logps(Gpt& model, const Batch& b, const torch::Tensor& chosen_targets) {
  const torch::Device device = b.input.device();  // the compute device (data/loader.h batch_on)
  const torch::Tensor targets = b.target.to(device);
  const int64_t rows = b.input.size(0);
  const Picks completions = pick_targets(targets, rows);
  Picks chosen;
  if (chosen_targets.defined()) chosen = pick_targets(chosen_targets.to(device), rows);
  const auto both = [&](const torch::Tensor& a, const torch::Tensor& c) {
    return c.defined() ? torch::cat({a, c}) : a;
  };
  // One head over both sets of positions (a chosen completion's appear in each: computed twice).
  const torch::Tensor logps = model->token_logps(b.input, both(completions.position, chosen.position),
                                                 both(completions.token, chosen.token), b.token_layout);
  const int64_t n = completions.position.size(0);
  RowLogps out;
  out.sums = torch::zeros({targets.size(0)}, logps.options()).index_add(0, completions.row, logps.narrow(0, 0, n));
  out.completion_tokens = (targets != kIgnoreIndex).sum(1).to(torch::kFloat);
  if (chosen_targets.defined()) out.chosen_nll = -logps.narrow(0, n, logps.size(0) - n).sum();
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

}  // namespace gputrain
