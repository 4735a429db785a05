#include "optim/optimizer_specs.h"

#include <stdexcept>

#include "config/schema.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw8bit.h"
#include "optim/lion.h"
#include "optim/make_optimizer.h"
#include "optim/muon.h"
#include "optim/sgd.h"

namespace gputrain {

bool OptimizerSpec::reads(const std::string& key) const {
  for (const auto& claim : keys)
    if (claim.back() == '.' ? key.compare(0, claim.size(), claim) == 0 : key == claim) return true;
  return false;
}

const std::vector<const OptimizerSpec*>& optimizer_specs() {
  static const std::vector<const OptimizerSpec*> all = {
      &adamw_spec(), &adamw8bit_spec(), &adafactor_spec(), &lion_spec(), &sgd_spec(), &muon_spec(),
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

class SpecOptimizerRules : public OptimizerRules {
 public:
  std::vector<OptimizerProblem> check(const OptimSettings& o,
                                      const std::function<bool(const std::string&)>& changed) const override {
    const OptimizerSpec& chosen = optimizer_spec(o.name);
    std::vector<OptimizerProblem> problems;
    for (const FieldSpec& f : schema()) {
      if (chosen.reads(f.path) || !changed(f.path)) continue;
      for (const OptimizerSpec* other : optimizer_specs())
        if (other->reads(f.path)) {
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

const OptimizerRules& optimizer_rules() {
  static const SpecOptimizerRules optimizers;
  return optimizers;
}

std::string optimizer_table_markdown() {
  const Settings defaults;
  std::string out =
      "| `optim.name` | state per parameter | update kernels | its own keys (defaults) | what it is |\n"
      "|---|---|---|---|---|\n";
  for (const OptimizerSpec* spec : optimizer_specs()) {
    OptimSettings o;
    o.name = spec->name;
    std::string keys;
    for (const FieldSpec& f : schema())
      if (spec->reads(f.path)) keys += (keys.empty() ? "`" : ", `") + f.path + "` " + f.write(defaults).dump();
    const std::string kernels = spec->foreach && spec->fused ? "foreach, fused" : spec->fused ? "fused" : "foreach";
    out += "| `" + optim_name(spec->name) + "` | " + spec->state_rule(o) + " | " + kernels + " | " + keys + " | " +
           spec->summary + " |\n";
  }
  return out;
}

}  // namespace gputrain
