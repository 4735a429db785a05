// What loading a recipe needs from the layers above config/: the rules of the architecture model.arch
// names (ModelRules, implemented in model/architecture.h), of the optimizer optim.name names
// (OptimizerRules, implemented by the optimizers' own files in optim/) and of the objective
// train.objective names (ObjectiveRules, objective/). objective/objectives.h recipe_rules() hands
// them; config/ names no architecture, optimizer or objective.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "config/model_rules.h"
#include "config/settings.h"

namespace gputrain {

// One problem with an optim.* key: validation reports it at the key's origin.
struct OptimizerProblem {
  std::string key;
  std::string problem;
  std::string fix;
  bool error = false;  // else a warning
};

class OptimizerRules {
 public:
  virtual ~OptimizerRules() = default;
  // The chosen optimizer's view of the optim.* keys: a key set for another optimizer (it has no
  // effect), and the optimizer's own checks. `changed(key)`: the recipe sets the key to a value other
  // than its default (a resolved recipe spells out every key).
  virtual std::vector<OptimizerProblem> check(const OptimSettings& o,
                                              const std::function<bool(const std::string&)>& changed) const = 0;
};

// The same for the train.* keys only some objectives read (train.preference.*): one set for an
// objective that does not read it is an error.
class ObjectiveRules {
 public:
  virtual ~ObjectiveRules() = default;
  virtual std::vector<OptimizerProblem> check(const Settings& s,
                                              const std::function<bool(const std::string&)>& changed) const = 0;
};

struct RecipeRules {
  const ModelRules& model;
  const OptimizerRules& optimizer;
  const ObjectiveRules& objective;
};

}  // namespace gputrain
