#include "optim/optimizer_specs.h"

#include <stdexcept>

#include "config/schema.h"
#include "model/architecture.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw8bit.h"
#include "optim/lion.h"
#include "optim/make_optimizer.h"
#include "optim/sgd.h"

namespace gputrain {

const std::vector<const OptimizerSpec*>& optimizer_specs() {
  static const std::vector<const OptimizerSpec*> all = {
      &adamw_spec(), &adamw8bit_spec(), &adafactor_spec(), &lion_spec(), &sgd_spec(),
  };
  return all;
}

const OptimizerSpec& optimizer_spec(OptimName name) {
  for (const OptimizerSpec* s : optimizer_specs())
    if (s->name == name) return *s;
  throw std::logic_error("optimizer_spec: optim.name value " + std::to_string(static_cast<int>(name)) +
                         " has no spec in optim/optimizer_specs.cpp");
}

namespace {

// Whether `key` is `claim` (a key) or lies under it (a prefix ending in '.').
bool key_claimed(const std::string& key, const std::string& claim) {
  return claim.back() == '.' ? key.compare(0, claim.size(), claim) == 0 : key == claim;
}

bool reads_key(const OptimizerSpec& spec, const std::string& key) {
  for (const auto& claim : spec.keys)
    if (key_claimed(key, claim)) return true;
  return false;
}

class SpecOptimizerRules : public OptimizerRules {
 public:
  std::vector<OptimizerProblem> check(const OptimSettings& o,
                                      const std::function<bool(const std::string&)>& changed) const override {
    const OptimizerSpec& chosen = optimizer_spec(o.name);
    std::vector<OptimizerProblem> problems;
    for (const FieldSpec& f : schema()) {
      if (reads_key(chosen, f.path) || !changed(f.path)) continue;
      for (const OptimizerSpec* other : optimizer_specs())
        if (reads_key(*other, f.path)) {
          problems.push_back({f.path, "has no effect with optim.name: " + optim_name(o.name),
                              "remove it, or choose the optimizer it belongs to"});
          break;
        }
    }
    if (chosen.check)
      for (auto& p : chosen.check(o, changed)) problems.push_back(std::move(p));
    return problems;
  }
};

}  // namespace

const RecipeRules& recipe_rules() {
  static const SpecOptimizerRules optimizers;
  static const RecipeRules rules{architecture_rules(), optimizers};
  return rules;
}

std::string optimizer_table_markdown() {
  const nlohmann::ordered_json defaults = settings_to_json(Settings{});
  std::string out =
      "| `optim.name` | state per parameter | update kernels | its own keys (defaults) | what it is |\n"
      "|---|---|---|---|---|\n";
  for (const OptimizerSpec* spec : optimizer_specs()) {
    OptimSettings o;
    o.name = spec->name;
    std::string keys;
    for (const FieldSpec& f : schema())
      if (reads_key(*spec, f.path)) {
        std::string pointer = "/" + f.path;
        for (char& c : pointer)
          if (c == '.') c = '/';
        keys += (keys.empty() ? "" : ", ") +
                ("`" + f.path + "` " + defaults.at(nlohmann::ordered_json::json_pointer(pointer)).dump());
      }
    const std::string kernels = spec->foreach && spec->fused ? "foreach, fused" : spec->fused ? "fused" : "foreach";
    out += "| `" + optim_name(spec->name) + "` | " + spec->state_rule(o) + " | " + kernels + " | " + keys + " | " +
           spec->summary + " |\n";
  }
  return out;
}

}  // namespace gputrain
