// train.objective: orpo (objective/objective_spec.h; objective/preference_loss.h holds what the
// preference objectives share).
#pragma once
#include "objective/objective_spec.h"

namespace gputrain {

ObjectiveSpec orpo_objective(const PreferenceSettings& p);
const ObjectiveSpec& orpo_spec();  // with train.preference's defaults: the registry's

}  // namespace gputrain
