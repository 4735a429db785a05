#include "train/objective_metrics.h"

#include <algorithm>

#include "report/run_summary.h"
#include "parallel/replica_sums.h"

namespace gputrain {

namespace {

double mean(const torch::Tensor& sums, int64_t i, int64_t units) {
  return round_to(sums[i].item<double>() / static_cast<double>(std::max<int64_t>(units, 1)), 6);
}

}  // namespace

void ObjectiveMetrics::prepare(std::vector<Batch>& micro, torch::Device device) const {
  if (objective_.metric_names.empty()) return;
  for (Batch& b : micro)  // on the device: the losses add to them without a copy to the host
    b.metric_sums = torch::zeros({static_cast<int64_t>(objective_.metric_names.size())},
                                 torch::TensorOptions().dtype(torch::kDouble).device(device));
}

void ObjectiveMetrics::add_step(const std::vector<Batch>& micro, const ProcessGroups& groups, int64_t units) {
  if (objective_.metric_names.empty()) return;
  torch::Tensor step = torch::zeros_like(micro.front().metric_sums);
  for (const Batch& b : micro) step += b.metric_sums;
  step = global_sums(groups, step);
  sums_ = sums_.defined() ? sums_ + step : step;
  units_ += units;
}

void ObjectiveMetrics::write_line(nlohmann::ordered_json& rec) {
  if (!sums_.defined()) return;
  const torch::Tensor host = sums_.cpu();
  for (size_t i = 0; i < objective_.metric_names.size(); ++i)
    rec[objective_.metric_names[i]] = mean(host, static_cast<int64_t>(i), units_);
  sums_ = torch::Tensor();
  units_ = 0;
}

nlohmann::ordered_json ObjectiveMetrics::evaluation(const std::vector<double>& sums, int64_t units,
                                                    const ProcessGroups* groups, torch::Device device) const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (sums.empty()) return out;
  torch::Tensor t = torch::tensor(sums, torch::kDouble);
  if (groups) t = global_sums(*groups, t.to(device)).cpu();
  for (size_t i = 0; i < sums.size(); ++i)
    out["eval_" + objective_.metric_names[i]] = mean(t, static_cast<int64_t>(i), units);
  return out;
}

}  // namespace gputrain
