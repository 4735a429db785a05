// The objective's own metrics per unit (ObjectiveSpec::metric_names: the preference objectives'
// rewards/*, logps/*): each step's micro-batch sums over every replica, their means over the steps
// of a metrics line, and evaluation's, as metrics.jsonl records them ("eval_" before an
// evaluation's). Nothing for an objective without metrics.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <vector>

#include "data/loader.h"
#include "objective/objective_spec.h"
#include "parallel/process_groups.h"

namespace gputrain {

class ObjectiveMetrics {
 public:
  explicit ObjectiveMetrics(const ObjectiveSpec& objective) : objective_(objective) {}

  // Gives each micro-batch zeroed sums on `device`, which its loss adds to.
  void prepare(std::vector<Batch>& micro, torch::Device device) const;
  // After the step: its micro-batches' sums over every replica, over `units` units, join the line's.
  void add_step(const std::vector<Batch>& micro, const ProcessGroups& groups, int64_t units);
  // The means since the last line into `rec`; the next line starts from none.
  void write_line(nlohmann::ordered_json& rec);
  // Evaluation's sums (ForwardBackward::take_eval_metric_sums) over `units` as "eval_<name>" means,
  // summed over the world first where each rank evaluated its share (`groups`; null: the same batches).
  nlohmann::ordered_json evaluation(const std::vector<double>& sums, int64_t units, const ProcessGroups* groups,
                                    torch::Device device) const;

 private:
  const ObjectiveSpec& objective_;
  torch::Tensor sums_;  // since the last line, on the device
  int64_t units_ = 0;
};

}  // namespace gputrain
