// What loading a recipe needs to know of the architecture model.arch names. config/ sits below
// model/, which implements this (model/architecture.h, architecture_rules()): so config names no
// architecture, and an architecture's defaults and rules live in its own file there.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

// One problem with a model.* key: validation reports it with the key's origin.
struct KeyProblem {
  std::string key;
  std::string problem;
  std::string fix;
};

class ModelRules {
 public:
  virtual ~ModelRules() = default;
  // Sets the keys whose default follows the architecture, where `set_by_recipe(key)` is false.
  virtual void apply_defaults(ModelSettings& m, const std::function<bool(const std::string&)>& set_by_recipe) const = 0;
  // The architecture's own checks of the model.* keys.
  virtual std::vector<KeyProblem> check(const ModelSettings& m) const = 0;
  // The MLP's hidden size: model.mlp_width, or the architecture's rule from model.mlp_ratio.
  virtual int64_t mlp_hidden(const ModelSettings& m) const = 0;
};

}  // namespace gputrain
