// Every optimizer optim.name can name, in one list (optimizer_specs.cpp: one line each), and what
// the layers below read through it: the recipe's rules (config/recipe_rules.h) and the docs' table.
#pragma once
#include <string>
#include <vector>

#include "config/recipe_rules.h"
#include "optim/optimizer_spec.h"

namespace gputrain {

const std::vector<const OptimizerSpec*>& optimizer_specs();
// The spec of `name`; a std::logic_error for one not registered (every enum value is: tested).
const OptimizerSpec& optimizer_spec(OptimName name);

// These optimizers' key rules, for load_recipe (objective/objectives.h recipe_rules()).
const OptimizerRules& optimizer_rules();

// docs/training.md's table of optimizers (`gputrain optim list`): name, state per parameter,
// kernels, the keys each reads with their defaults, what it is.
std::string optimizer_table_markdown();

}  // namespace gputrain
