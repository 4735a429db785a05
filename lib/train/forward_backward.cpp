#include "train/forward_backward.h"

#include <algorithm>

#include "model/moe.h"
#include "parallel/context_parallel.h"
#include "parallel/gradient_reducer.h"
#include "parallel/pipeline_stages.h"
#include "parallel/process_groups.h"
#include "train/train_step.h"

namespace gputrain {

ForwardBackward::ForwardBackward(const ProcessGroups& groups, GradientReducer& gradients, PipelineStages* pipeline,
                                 Gpt model, const Precision& precision, std::unique_ptr<StepGraph> graph)
    : groups_(groups),
      gradients_(gradients),
      pipeline_(pipeline),
      model_(std::move(model)),
      precision_(precision),
      graph_(std::move(graph)) {}

torch::Tensor ForwardBackward::step(const std::vector<Batch>& micro, int64_t global_targets) {
  // (A step graph runs one process without mixture layers or a pipeline: validate says so.)
  if (graph_) {
    const bool captured_before = graph_->keeps_gradients();
    torch::Tensor loss = graph_->accumulate(model_, micro, precision_, global_targets);
    captured_now_ = !captured_before && graph_->keeps_gradients();
    return loss;
  }
  // Context parallelism: this rank runs its chunks of every sequence; the loss sums over the cp group.
  Communicator* cp = groups_.cp();
  const std::vector<Batch> mine = cp ? context_parts(micro, *cp) : micro;
  const auto n = static_cast<int64_t>(mine.size());
  const int64_t forwards = pipeline_ ? pipeline_->micro_batches(n) : n;
  const int64_t replicas = groups_.dp() ? groups_.dp()->size() : 1;
  if (model_->moe)
    model_->moe->aux_grad_scale = moe_aux_grad_scale(model_->cfg, forwards * replicas, precision_.loss_scale());
  torch::Tensor loss = pipeline_ ? pipeline_->step(model_, mine, precision_, global_targets, gradients_.backward_hook())
                                 : accumulate_gradients(model_, mine, &precision_,
                                                        AccumulateOptions{global_targets, gradients_.backward_hook()});
  if (cp) {
    loss = loss.detach().clone();
    cp->all_reduce_sum_now(loss, "sum of the context-parallel chunks' loss");
  }
  return loss;
}

double ForwardBackward::evaluate(const std::vector<Batch>& batches) {
  Communicator* cp = groups_.cp();
  const std::vector<Batch> mine = cp ? context_parts(batches, *cp) : batches;
  // (The pipeline's evaluation sums over the world, the cp ranks' chunks included.)
  if (pipeline_) return pipeline_->evaluate(model_, mine, precision_);
  if (!cp) return gputrain::evaluate(model_, batches, &precision_);
  const LossSum part = evaluate_sum(model_, mine, &precision_);
  torch::Tensor sum = torch::tensor({part.loss, static_cast<double>(part.targets)}, torch::kDouble);
  cp->all_reduce_sum_now(sum, "sum of the context-parallel chunks' evaluation loss");
  return sum[0].item<double>() / std::max(sum[1].item<double>(), 1.0);
}

void ForwardBackward::run_in_step_memory(const std::function<void()>& f) {
  if (graph_) graph_->run_in_graph_memory(f);
  else f();
}

std::optional<nlohmann::ordered_json> ForwardBackward::graph_report() const {
  if (!graph_) return std::nullopt;
  return graph_->report();
}

}  // namespace gputrain
