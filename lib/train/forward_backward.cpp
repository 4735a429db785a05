#include "train/forward_backward.h"

#include <algorithm>
#include <utility>

#include "model/moe.h"
#include "objective/objectives.h"
#include "parallel/context_parallel.h"
#include "parallel/gradient_reducer.h"
#include "parallel/pipeline_stages.h"
#include "parallel/process_groups.h"
#include "train/train_step.h"

namespace gputrain {

ForwardBackward::ForwardBackward(const ProcessGroups& groups, GradientReducer* gradients, PipelineStages* pipeline,
                                 Gpt model, const Precision& precision, const ObjectiveSpec& objective,
                                 std::unique_ptr<StepGraph> graph)
    : groups_(groups),
      gradients_(gradients),
      pipeline_(pipeline),
      model_(std::move(model)),
      precision_(precision),
      objective_(objective),
      graph_(std::move(graph)) {}

ForwardBackward::Counts ForwardBackward::counts(const std::vector<Batch>& micro) const {
  Counts n;
  for (const Batch& b : micro) {
    check_batch_fields(objective_, b, "data.train");
    n.units += objective_.units(b);
    n.targets += b.target_count;
    if (objective_.second_units) n.second += objective_.second_units(b);
  }
  return n;
}

torch::Tensor ForwardBackward::step(const std::vector<Batch>& micro, int64_t global_units) {
  // (A step graph runs one process without mixture layers or a pipeline: validate says so.)
  if (graph_) {
    const bool captured_before = graph_->keeps_gradients();
    torch::Tensor loss = graph_->accumulate(model_, micro, precision_, global_units);
    captured_now_ = !captured_before && graph_->keeps_gradients();
    return loss;
  }
  // Context parallelism: this rank runs its chunks of every sequence; its loss is their share.
  Communicator* cp = groups_.cp();
  const std::vector<Batch> mine = cp ? context_parts(micro, *cp) : micro;
  const auto n = static_cast<int64_t>(mine.size());
  const int64_t forwards = pipeline_ ? pipeline_->micro_batches(n) : n;
  const int64_t replicas = groups_.dp() ? groups_.dp()->size() : 1;
  if (model_->moe)
    model_->moe->aux_grad_scale = moe_aux_grad_scale(model_->cfg, forwards * replicas, precision_.loss_scale());
  std::function<void(bool)> hook = gradients_ ? gradients_->backward_hook() : nullptr;
  if (pipeline_) return pipeline_->step(model_, objective_, mine, precision_, global_units, std::move(hook));
  return accumulate_gradients(model_, mine, &precision_,
                              AccumulateOptions{global_units, std::move(hook), {}, &objective_});
}

void ForwardBackward::trial_step(const Batch& b) {
  accumulate_gradients(model_, {b}, &precision_, AccumulateOptions{0, nullptr, {}, &objective_});
}

double ForwardBackward::evaluate(const std::vector<Batch>& given) {
  // Each batch's second term weighed by its own units (evaluation has no step to count over).
  std::vector<Batch> batches = given;
  prepare(batches);
  const auto metrics = static_cast<int64_t>(objective_.metric_names.size());
  for (Batch& b : batches) {
    if (objective_.second_units)
      b.second_unit_weight = static_cast<double>(objective_.units(b)) /
                             static_cast<double>(std::max<int64_t>(objective_.second_units(b), 1));
    if (metrics > 0) b.metric_sums = torch::zeros({metrics}, torch::kDouble);
  }
  Communicator* cp = groups_.cp();
  const std::vector<Batch> mine = cp ? context_parts(batches, *cp) : batches;  // (the same metric sums)
  // Under cp the chunks' loss sums and units add up over the cp ranks (a whole-sequence loss's are
  // whole on each, so their ratio holds too); the pipeline's evaluation sums over the world.
  double loss = 0;
  if (pipeline_) {
    loss = pipeline_->evaluate(model_, objective_, mine, precision_);
  } else if (!cp) {
    loss = gputrain::evaluate(model_, batches, &precision_, objective_);
  } else {
    const LossSum part = evaluate_sum(model_, mine, &precision_, objective_);
    torch::Tensor sum = torch::tensor({part.loss, static_cast<double>(part.targets)}, torch::kDouble);
    cp->all_reduce_sum_now(sum, "sum of the context-parallel chunks' evaluation loss");
    loss = sum[0].item<double>() / std::max(sum[1].item<double>(), 1.0);
  }
  if (metrics == 0) return loss;
  // Every cp rank holds the whole sums (its objective's are of whole sequences).
  torch::Tensor sums = torch::zeros({metrics}, torch::kDouble);
  for (const Batch& b : batches) sums += b.metric_sums.cpu();
  // A pipeline's last stage has them; every replica evaluates the same batches, so its stages share them.
  if (pipeline_) {
    torch::Tensor wire = sums.to(groups_.pp()->tensor_device());
    groups_.pp()->all_reduce_sum_now(wire, "the pipeline's evaluation metric sums");
    sums = wire.cpu();
  }
  eval_metric_sums_.resize(static_cast<size_t>(metrics), 0.0);
  for (int64_t i = 0; i < metrics; ++i) eval_metric_sums_[static_cast<size_t>(i)] += sums[i].item<double>();
  return loss;
}

std::vector<double> ForwardBackward::take_eval_metric_sums() { return std::exchange(eval_metric_sums_, {}); }

void ForwardBackward::run_in_step_memory(const std::function<void()>& f) {
  if (graph_) graph_->run_in_graph_memory(f);
  else f();
}

std::optional<nlohmann::ordered_json> ForwardBackward::graph_report() const {
  if (!graph_) return std::nullopt;
  return graph_->report();
}

}  // namespace gputrain
