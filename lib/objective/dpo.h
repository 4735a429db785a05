// train.objective: dpo (objective/objective_spec.h; objective/preference_loss.h holds what the
// preference objectives share).
#pragma once
#include "objective/objective_spec.h"

namespace gputrain {

ObjectiveSpec dpo_objective(const PreferenceSettings& p);
const ObjectiveSpec& dpo_spec();  // with train.preference's defaults: the registry's

}  // namespace gputrain
