#include "objective/preference_loss.h"

#include "util/ignore_index.h"

namespace gputrain {

namespace {

// Every target of `targets` [R, T] (not kIgnoreIndex), row by row: its flat position in the input's
// rows x T (target row r reads input row `input_rows[r]`) and its token.
struct Picks {
  torch::Tensor position, token;
};
Picks pick_targets(const torch::Tensor& targets, const torch::Tensor& input_rows) {
  const torch::Tensor at = (targets != kIgnoreIndex).nonzero();
  const torch::Tensor r = at.select(1, 0), t = at.select(1, 1);
  return {input_rows.index_select(0, r) * targets.size(1) + t, targets.index({r, t})};
}

// The log-probabilities of targets at flat positions of the batch's input rows, summed over
// consecutive segments (Gpt::logp_sums).
using LogpSumsAt = std::function<torch::Tensor(const torch::Tensor& positions, const torch::Tensor& targets,
                                               const std::vector<int64_t>& segments)>;

RowLogps row_logps_at(const Gpt& model, const LogpSumsAt& sums_at, const Batch& b,
                      const torch::Tensor& chosen_targets) {
  const torch::Device device = b.input.device();  // the compute device (data/loader.h batch_on)
  const torch::Tensor targets = b.target.to(device), rows = b.target_rows.to(device);
  const Picks completions = pick_targets(targets, rows);  // row by row: each row's targets one segment
  const torch::Tensor per_row = (targets != kIgnoreIndex).sum(1);
  const torch::Tensor counts = per_row.cpu();
  std::vector<int64_t> segments(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
  torch::Tensor positions = completions.position, tokens = completions.token;
  if (chosen_targets.defined()) {  // one segment more: every chosen target (a chosen completion's twice)
    const Picks chosen = pick_targets(chosen_targets.to(device), chosen_half(rows, b.pairs));
    positions = torch::cat({positions, chosen.position});
    tokens = torch::cat({tokens, chosen.token});
    segments.push_back(chosen.position.size(0));
  }
  const torch::Tensor sums = sums_at(positions, tokens, segments);
  RowLogps out;
  out.sums = sums.narrow(0, 0, targets.size(0));
  // (Where the sequences are split over processes, their parts' counts too.)
  out.completion_tokens = model->whole_sequence_sums(per_row.to(torch::kFloat));
  if (chosen_targets.defined()) out.chosen_nll = -sums[targets.size(0)];
  return out;
}

}  // namespace

RowLogps row_logps(Gpt& model, const Batch& b, const torch::Tensor& chosen_targets) {
  return row_logps_at(
      model,
      [&](const torch::Tensor& positions, const torch::Tensor& targets, const std::vector<int64_t>& segments) {
        return model->logp_sums(b.input, positions, targets, segments, b.token_layout);
      },
      b, chosen_targets);
}

RowLogps stream_row_logps(Gpt& model, const torch::Tensor& stream, const Batch& b,
                          const torch::Tensor& chosen_targets) {
  return row_logps_at(
      model,
      [&](const torch::Tensor& positions, const torch::Tensor& targets, const std::vector<int64_t>& segments) {
        return model->head_logp_sums(stream, positions, targets, segments);
      },
      b, chosen_targets);
}

void set_preference_loss(ObjectiveSpec& spec, PreferenceLossOf loss, bool chosen_sequences) {
  spec.whole_sequence_loss = true;
  if (chosen_sequences)
    spec.prepare = [](Batch& b) {
      if (!b.chosen_targets.defined()) b.chosen_targets = chosen_sequence_targets(b);
    };
  const auto chosen = [chosen_sequences](const Batch& b) {
    return chosen_sequences ? chosen_targets_of(b) : torch::Tensor();
  };
  spec.loss_sum = [loss, chosen](Gpt& model, const Batch& b) { return loss(b, row_logps(model, b, chosen(b))); };
  spec.stream_loss_sum = [loss, chosen](Gpt& model, const torch::Tensor& stream, const Batch& b) {
    return loss(b, stream_row_logps(model, stream, b, chosen(b)));
  };
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
  // Each chosen sequence's input row, from its first position to its last but one.
  const int64_t P = b.pairs;
  const torch::Device device = b.input.device();
  const torch::Tensor x = b.input.index_select(0, chosen_half(b.target_rows, P).to(device));
  const int64_t T = x.size(1);
  const torch::Tensor next = torch::cat({x.narrow(1, 1, T - 1), torch::zeros({x.size(0), 1}, x.options())}, 1);
  const torch::Tensor position = torch::arange(T, x.options()).unsqueeze(0);
  const torch::Tensor first = chosen_half(b.target_offsets, P).to(device).unsqueeze(1);
  const torch::Tensor last = first + chosen_half(b.lengths, P).to(device).unsqueeze(1);
  const torch::Tensor real = (position >= first) & (position + 1 < last);
  return torch::where(real, next, torch::full_like(next, kIgnoreIndex));
}

torch::Tensor chosen_targets_of(const Batch& b) {
  return b.chosen_targets.defined() ? b.chosen_targets : chosen_sequence_targets(b);
}

int64_t target_tokens(const torch::Tensor& targets) { return (targets != kIgnoreIndex).sum().item<int64_t>(); }

}  // namespace gputrain
