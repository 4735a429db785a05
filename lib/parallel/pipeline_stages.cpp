#include "parallel/pipeline_stages.h"

#include <algorithm>

#include "util/device.h"

namespace gputrain {

PipelineStages::PipelineStages(const ProcessGroups& groups, const ParallelSettings& p, torch::Device device,
                               std::vector<StageLayers> stages)
    : groups_(groups),
      device_(device),
      schedule_(p.pp_schedule),
      pp_microbatches_(p.pp_microbatches),
      stages_(std::move(stages)),
      stage_(stages_.at(static_cast<size_t>(groups.coord().pp))) {}

int64_t PipelineStages::micro_batches(int64_t micro_batches) const {
  return pp_microbatches_ > 0 ? pp_microbatches_ : micro_batches;
}

torch::Tensor PipelineStages::step(Gpt& model, const ObjectiveSpec& objective, const std::vector<Batch>& micro,
                                   const Precision& precision, int64_t global_targets,
                                   std::function<void(bool last)> before_backward) {
  PipelineStepOptions o;
  o.objective = &objective;
  o.schedule = schedule_;
  o.stage = stage_;
  o.total_targets = global_targets;
  o.precision = &precision;
  o.before_backward = std::move(before_backward);
  o.memory_in_use = [device = device_] { return memory_in_use_bytes(device); };
  const bool recut = pp_microbatches_ > 0 && pp_microbatches_ != static_cast<int64_t>(micro.size());
  const std::vector<Batch> parts = recut ? split_micro_batches(micro, pp_microbatches_) : micro;
  micro_batches_ = static_cast<int64_t>(parts.size());
  torch::Tensor loss = pipeline_train_step(model, *groups_.pp(), parts, o, &stats_);
  // Only the last stage has a loss; the others' zero is summed with it.
  return loss.to(torch::kFloat);
}

double PipelineStages::evaluate(Gpt& model, const ObjectiveSpec& objective, const std::vector<Batch>& batches,
                                const Precision& precision) {
  const double sum = pipeline_eval_loss_sum(model, *groups_.pp(), batches, stage_, &precision, objective);
  int64_t count = 0;
  for (const auto& b : batches) count += objective.units(b);
  // The last stage has the sum; its ranks of dp 0 and tp 0 (one per cp chunk) tell the world (rank 0
  // writes the metrics).
  const bool speaks = stage_.has_head && groups_.coord().dp == 0 && groups_.coord().tp == 0;
  auto t = torch::tensor({speaks ? sum : 0.0, speaks ? static_cast<double>(count) : 0.0}, torch::kDouble);
  groups_.world_comm()->all_reduce_sum_now(t, "sum of the pipeline's evaluation loss");
  return t[0].item<double>() / std::max(t[1].item<double>(), 1.0);
}

void PipelineStages::forward_only(Gpt& model, std::vector<Batch>& batches, const Precision& precision,
                                  const std::function<void(const torch::Tensor& stream, Batch& b)>& at_head) const {
  pipeline_forward_only(model, *groups_.pp(), batches, stage_, &precision, at_head);
}

PipelineLayout PipelineStages::layout() const {
  PipelineLayout p;
  p.schedule = schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
  p.micro_batches = micro_batches_;
  p.bubble_fraction = bubble_fraction(groups_.grid().pp(), micro_batches_);
  for (const auto& st : stages_) p.stage_blocks.emplace_back(st.first, st.last);
  return p;
}

RankMemory PipelineStages::with_stage_memory(RankMemory m) const {
  m.stage = groups_.coord().pp;
  m.micro_batches_held = stats_.peak_micro_batches_held;
  m.activations_mb = static_cast<double>(stats_.peak_memory_bytes) / (1024.0 * 1024.0);
  return m;
}

}  // namespace gputrain
