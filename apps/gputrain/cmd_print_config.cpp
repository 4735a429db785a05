#include <cstdio>
#include <memory>

#include "commands.h"
#include "config/json_schema.h"
#include "config/recipe.h"
#include "config/schema.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"

namespace gputrain::app {

namespace {

struct PrintConfigArgs {
  CommonArgs common;
  std::string format = "yaml";
  bool reference = false;
  bool json_schema = false;
};

int print_config(const PrintConfigArgs& p) {
  if (p.json_schema) {
    std::fputs((recipe_json_schema().dump(2) + "\n").c_str(), stdout);
    return 0;
  }
  if (p.reference) {
    std::fputs(schema_reference_markdown().c_str(), stdout);
    return 0;
  }
  Recipe recipe = load_recipe(p.common.recipe, p.common.overrides, recipe_rules());
  for (const auto& w : recipe.warnings) std::fprintf(stderr, "warning: %s\n", w.str().c_str());
  std::string text = p.format == "json" ? recipe_to_json(recipe.settings) : recipe_to_yaml(recipe.settings);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace

void add_print_config(CLI::App& cli, Commands& commands) {
  auto p = std::make_shared<PrintConfigArgs>();
  auto* cmd = cli.add_subcommand("print-config", "print the fully resolved recipe, defaults included");
  add_recipe_args(cmd, p->common, false);
  cmd->add_option("--format", p->format, "output format")->check(CLI::IsMember({"yaml", "json"}));
  cmd->add_flag("--reference", p->reference, "print every key with its type, default and meaning (Markdown)");
  cmd->add_flag("--schema", p->json_schema,
                "print the recipe's JSON Schema (draft 2020-12) for editors: every key, type, range, default");
  commands.push_back({cmd, [p] { return print_config(*p); }});
}

}  // namespace gputrain::app
