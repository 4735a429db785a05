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

// What model.init_from's Hugging Face config.json gave the recipe (ModelRules::import_pretrained).
struct PretrainedImport {
  std::string config_file;          // empty: model.init_from names no Hugging Face folder
  std::vector<std::string> filled;  // the model.* keys taken from it
  std::vector<KeyProblem> problems;
};

class ModelRules {
 public:
  virtual ~ModelRules() = default;
  // Where model.init_from names a Hugging Face model folder: model.arch and every shape key the
  // recipe leaves out from its config.json; a key the recipe sets must agree (else a problem).
  virtual PretrainedImport import_pretrained(ModelSettings& m,
                                             const std::function<bool(const std::string&)>& set_by_recipe) const = 0;
  // Sets the keys whose default follows the architecture, where `set_by_recipe(key)` is false.
  virtual void apply_defaults(ModelSettings& m, const std::function<bool(const std::string&)>& set_by_recipe) const = 0;
  // The architecture's own checks of the model.* keys.
  virtual std::vector<KeyProblem> check(const ModelSettings& m) const = 0;
  // The MLP's hidden size: model.mlp_width, or the architecture's rule from model.mlp_ratio.
  virtual int64_t mlp_hidden(const ModelSettings& m) const = 0;
};

}  // namespace gputrain
