#include "train/train_step.h"

#include "util/error.h"

namespace gputrain {

torch::Tensor accumulate_gradients(Gpt& model, const std::vector<Batch>& micro_batches, const Precision* precision,
                                   const AccumulateOptions& options) {
  // Multiplying by a host number (the usual case) or by options.inv_total's device value.
  const bool on_device = options.inv_total.defined();
  const ObjectiveSpec& objective = *options.objective;
  const double inv_total = on_device ? 0.0 : inverse_unit_count(objective, micro_batches, options.total_targets);
  auto normalize = [&](const torch::Tensor& t) { return on_device ? t * options.inv_total : t * inv_total; };
  torch::Tensor loss_sum;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& b = micro_batches[i];
    torch::Tensor loss;
    {
      AutocastGuard autocast = autocast_for(precision);
      loss = objective.loss_sum(model, b);
    }
    // Backward outside autocast, as torch.autocast recommends: it replays the forward's dtypes.
    const torch::Tensor scaled = normalize(loss);
    if (options.before_backward) options.before_backward(i + 1 == micro_batches.size());
    (precision ? precision->for_backward(scaled) : scaled).backward();
    auto l = loss.detach();
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
  }
  return normalize(loss_sum);
}

LossSum evaluate_sum(Gpt& model, const std::vector<Batch>& batches, const Precision* precision,
                     const ObjectiveSpec& objective) {
  torch::NoGradGuard no_grad;
  AutocastGuard autocast = autocast_for(precision);
  const bool was_training = model->is_training();
  model->eval();
  LossSum sum;
  for (const auto& b : batches) {
    sum.loss += objective.loss_sum(model, b).item<double>();
    sum.targets += objective.units(b);
  }
  model->train(was_training);
  return sum;
}

double evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision* precision,
                const ObjectiveSpec& objective) {
  const LossSum sum = evaluate_sum(model, batches, precision, objective);
  return sum.loss / static_cast<double>(std::max<int64_t>(sum.targets, 1));
}

}  // namespace gputrain
