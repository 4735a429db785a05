#include "train/forward_backward.h"

#include "model/moe.h"
#include "parallel/parallel_run.h"
#include "train/train_step.h"

namespace gputrain {

ForwardBackward::ForwardBackward(ParallelRun& par, Gpt model, const Precision& precision,
                                 std::unique_ptr<StepGraph> graph)
    : par_(par), model_(std::move(model)), precision_(precision), graph_(std::move(graph)) {}

torch::Tensor ForwardBackward::step(const std::vector<Batch>& micro, int64_t global_targets) {
  // (A step graph runs one process without mixture layers or a pipeline: validate says so.)
  if (graph_) {
    const bool captured_before = graph_->keeps_gradients();
    torch::Tensor loss = graph_->accumulate(model_, micro, precision_, global_targets);
    captured_now_ = !captured_before && graph_->keeps_gradients();
    return loss;
  }
  const auto n = static_cast<int64_t>(micro.size());
  const int64_t forwards = par_.pipelined() ? par_.pipeline_micro_batches(n) : n;
  if (model_->moe)
    model_->moe->aux_grad_scale = moe_aux_grad_scale(model_->cfg, forwards * par_.replicas(), precision_.loss_scale());
  if (par_.pipelined()) return par_.pipeline_step(model_, micro, precision_, global_targets);
  return accumulate_gradients(model_, micro, &precision_, AccumulateOptions{global_targets, par_.backward_hook()});
}

double ForwardBackward::evaluate(const std::vector<Batch>& batches) {
  if (par_.pipelined()) return par_.pipeline_evaluate(model_, batches, precision_);
  return gputrain::evaluate(model_, batches, &precision_);
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
