#include <cstdio>

#include "commands.h"
#include "config/json_schema.h"
#include "config/recipe.h"
#include "config/schema.h"
#include "model/architecture.h"

namespace gputrain::app {

int cmd_print_config(const CommonArgs& a, const std::string& format, bool reference, bool json_schema) {
  if (json_schema) {
    std::fputs((recipe_json_schema().dump(2) + "\n").c_str(), stdout);
    return 0;
  }
  if (reference) {
    std::fputs(schema_reference_markdown().c_str(), stdout);
    return 0;
  }
  Recipe recipe = load_recipe(a.recipe, a.overrides, architecture_rules());
  for (const auto& w : recipe.warnings) std::fprintf(stderr, "warning: %s\n", w.str().c_str());
  std::string text = format == "json" ? recipe_to_json(recipe.settings) : recipe_to_yaml(recipe.settings);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace gputrain::app
