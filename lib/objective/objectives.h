// Every objective train.objective can name, in one list (objectives.cpp: one line each), and the
// step's one normalization of their losses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe_rules.h"
#include "objective/objective_spec.h"

namespace gputrain {

const std::vector<const ObjectiveSpec*>& objective_specs();
// The spec of `name`; a std::logic_error for one not registered (every enum value is: tested).
const ObjectiveSpec& objective_spec(TrainObjective name);
// The spec of train.objective's default (causal_lm), for the callers that train or evaluate
// without a recipe (unit tests, `gputrain eval` of a model whose recipe predates the key).
const ObjectiveSpec& default_objective();
// The spec with the recipe's train.* settings (train.preference for dpo, orpo, simpo): what the step runs.
ObjectiveSpec configured_objective(const TrainSettings& t);
// Whether DPO's reference is a frozen copy of the starting weights (no LoRA, or reference: model)
// rather than the base with the adapters off (train/reference_model.h); a precomputed table is
// computed from whichever it is.
bool reference_is_frozen_copy(const Settings& s);
// Whether the run holds a frozen copy of the starting weights through its steps as DPO's reference
// (train/reference_model.h): a reference-reading objective without LoRA's adapters-off base, not
// precomputed (whose copy is freed before the steps).
bool holds_frozen_reference(const Settings& s);
// Whether `spec` reads train.* key `key` (ObjectiveSpec::keys).
bool objective_reads(const ObjectiveSpec& spec, const std::string& key);
// What load_recipe needs: model.arch's architecture rules, optim.name's and train.objective's key rules.
const RecipeRules& recipe_rules();

// "causal_lm" etc. as written in recipes.
std::string objective_name(TrainObjective name);

// Throws a runtime Error naming train.objective and the missing field unless `b` carries every
// field `objective` declares (`where`: which data, e.g. "data.train").
void check_batch_fields(const ObjectiveSpec& objective, const Batch& b, const std::string& where);

// The units a step's loss is divided by: `total_units` (the step's, over every replica), or where
// it is 0 the micro-batches' own; 1 / that. A step without units (chat prompts only) is divided by
// 1: it adds nothing to the gradients.
double inverse_unit_count(const ObjectiveSpec& objective, const std::vector<Batch>& micro_batches, int64_t total_units);

// docs/training.md's table of objectives: name, fields it reads, what it is.
std::string objective_table_markdown();

}  // namespace gputrain
