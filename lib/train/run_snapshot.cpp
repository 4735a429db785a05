#include "train/run_snapshot.h"

#include "checkpoint/checkpoint_part.h"
#include "config/recipe.h"
#include "config/schema.h"
#include "model/lora.h"
#include "parallel/parallelize.h"
#include "parallel/process_groups.h"
#include "util/device.h"

namespace gputrain {

TrainingSnapshot snapshot_of_run(const TrainingCounters& counters, const Settings& s, const SamplerState& sampler,
                                 const Precision& precision, torch::Device device, const Optimizer& optimizer,
                                 const ProcessGroups& groups, const ParallelModel& par, const std::string& lora_base) {
  TrainingSnapshot snap;
  snap.counters = counters;
  snap.per_device_batch_size = s.train.per_device_batch_size;
  snap.grad_accum_steps = s.train.grad_accum_steps;
  snap.sampler = sampler;
  if (precision.scaler()) snap.scaler = precision.scaler()->state();
  snap.rng = capture_rng(device);
  snap.settings = settings_to_json(s);
  snap.recipe_yaml = recipe_to_yaml(s);
  snap.optimizer = optimizer.describe();
  if (groups.distributed()) {
    snap.part = checkpoint_part(groups, par.share, par.gradients->shards_optimizer_state(), optimizer);
    snap.tp_split = par.share.tensor_split;
  } else {
    snap.model = par.share.weights;
    for (const auto& e : optimizer.state()) snap.optimizer_state.push_back({e.name, e.tensor});
  }
  if (!lora_base.empty()) {
    snap.lora_base = lora_base;
    std::erase_if(snap.part ? snap.part->model : snap.model,
                  [](const NamedTensor& w) { return !is_lora_parameter(w.name); });
  }
  return snap;
}

}  // namespace gputrain
