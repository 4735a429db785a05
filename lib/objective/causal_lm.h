// train.objective: causal_lm, next-token cross-entropy (objective/objective_spec.h).
#pragma once
#include "objective/objective_spec.h"

namespace gputrain {

const ObjectiveSpec& causal_lm_spec();

}  // namespace gputrain
