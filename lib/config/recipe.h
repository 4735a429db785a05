// Loading a recipe: file (or the built-in quickstart) -> `extends:` bases ->
// --set overrides -> typed Settings -> cross-field validation. Precedence is
// defaults < extends bases (in list order) < the recipe < --set (DESIGN rule 3).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "config/diagnostics.h"
#include "config/model_rules.h"
#include "config/recipe_rules.h"
#include "config/settings.h"

namespace gputrain {

struct Recipe {
  Settings settings;
  std::map<std::string, Origin> origins;  // every key -> where its value came from
  std::vector<Diagnostic> warnings;
  std::vector<std::string> files;  // the recipe files read, bases first
  std::string source;              // what the user named ("<built-in quickstart>" for none)
};

// `path` empty = the built-in quickstart recipe. `rules`: what model.arch's architecture and
// optim.name's optimizer add (objective/objectives.h recipe_rules()). Throws a config Error that
// lists every problem found.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides, const RecipeRules& rules);

// The settings of a resolved recipe saved earlier (a checkpoint's
// recipe.yaml): typed, without the cross-field checks (its data files need
// not exist here); `rules`: model/architecture.h architecture_rules(). Throws a config Error naming `source` when it
// does not bind.
Settings settings_from_saved_recipe(const std::string& yaml, const std::string& source, const ModelRules& rules);

// The YAML of the built-in quickstart recipe (configs/quickstart.yaml, embedded at build time).
const std::string& builtin_quickstart_yaml();
extern const char* const kBuiltinQuickstartName;

// print-config output: the fully resolved recipe.
std::string recipe_to_yaml(const Settings& s);
std::string recipe_to_json(const Settings& s);
// A short stable hash of the resolved recipe (summary.json's recipe_hash).
std::string recipe_hash(const Settings& s);

}  // namespace gputrain
