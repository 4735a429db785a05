// What a checkpoint of the run holds on this rank, taken as a step ends: the counters, the batch
// split, the data position, the generators, the loss scale, the settings, and the weights and
// optimizer state this rank holds (a parallel run: its part, checkpoint/checkpoint_part.h; with
// model.lora.save: adapters, the adapters alone and the base's fingerprint).
#pragma once
#include <string>

#include "checkpoint/training_checkpoint.h"
#include "config/settings.h"
#include "data/sampler.h"
#include "optim/optimizer.h"
#include "precision/precision.h"

namespace gputrain {

class ProcessGroups;
struct ParallelModel;

TrainingSnapshot snapshot_of_run(const TrainingCounters& counters, const Settings& s, const SamplerState& sampler,
                                 const Precision& precision, torch::Device device, const Optimizer& optimizer,
                                 const ProcessGroups& groups, const ParallelModel& par, const std::string& lora_base);

}  // namespace gputrain
