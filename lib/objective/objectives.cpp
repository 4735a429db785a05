#include "objective/objectives.h"

#include <algorithm>
#include <stdexcept>

#include "config/schema.h"
#include "model/architecture.h"
#include "objective/causal_lm.h"
#include "objective/dpo.h"
#include "objective/orpo.h"
#include "objective/simpo.h"
#include "optim/optimizer_specs.h"
#include "util/error.h"

namespace gputrain {

const std::vector<const ObjectiveSpec*>& objective_specs() {
  static const std::vector<const ObjectiveSpec*> all = {
      &causal_lm_spec(),
      &dpo_spec(),
      &orpo_spec(),
      &simpo_spec(),
  };
  return all;
}

const ObjectiveSpec& objective_spec(TrainObjective name) {
  for (const ObjectiveSpec* s : objective_specs())
    if (s->name == name) return *s;
  throw std::logic_error("objective_spec: train.objective value " + std::to_string(static_cast<int>(name)) +
                         " has no spec in objective/objectives.cpp");
}

const ObjectiveSpec& default_objective() { return objective_spec(TrainSettings{}.objective); }

ObjectiveSpec configured_objective(const TrainSettings& t) {
  const ObjectiveSpec& spec = objective_spec(t.objective);
  return spec.with_settings ? spec.with_settings(t) : spec;
}

bool reference_is_frozen_copy(const Settings& s) {
  return s.model.lora.rank == 0 || s.train.preference.reference == PreferenceReference::kModel;
}

bool holds_frozen_reference(const Settings& s) {
  return objective_spec(s.train.objective).reads(BatchField::kReference) && reference_is_frozen_copy(s) &&
         s.train.preference.reference != PreferenceReference::kPrecomputed;
}

bool objective_reads(const ObjectiveSpec& spec, const std::string& key) {
  for (const auto& claim : spec.keys)
    if (claim.back() == '.' ? key.compare(0, claim.size(), claim) == 0 : key == claim) return true;
  return false;
}

namespace {

// A train.* key that only other objectives read is an error (it would do nothing).
class SpecObjectiveRules : public ObjectiveRules {
 public:
  std::vector<OptimizerProblem> check(const Settings& s,
                                      const std::function<bool(const std::string&)>& changed) const override {
    const TrainSettings& t = s.train;
    const ObjectiveSpec& chosen = objective_spec(t.objective);
    const std::string name = objective_name(t.objective);
    std::vector<OptimizerProblem> problems;
    for (const FieldSpec& f : schema()) {
      if (objective_reads(chosen, f.path) || !changed(f.path)) continue;
      std::string readers;
      for (const ObjectiveSpec* other : objective_specs())
        if (objective_reads(*other, f.path)) readers += (readers.empty() ? "" : ", ") + objective_name(other->name);
      if (!readers.empty())
        problems.push_back({f.path, "has no effect with train.objective: " + name,
                            "remove it, or choose an objective that reads it (" + readers + ")", true});
    }
    const bool pairs = chosen.reads(BatchField::kPairs);
    if (s.parallel.pp > 1 && !chosen.stream_loss_sum)
      problems.push_back({"parallel.pp", "train.objective " + name + " does not run under a pipeline yet",
                          "use data parallelism (parallel.dp, ZeRO) for " + name + ", or parallel.pp: 1", true});
    if (s.parallel.pp > 1 && pairs && s.parallel.pp_microbatches > 0 &&
        s.parallel.pp_microbatches != s.train.grad_accum_steps)
      problems.push_back({"parallel.pp_microbatches",
                          "re-cuts a step's micro-batches by rows, and " + name +
                              "'s rows are not its pairs (a pair's targets read a row by index)",
                          "set parallel.pp_microbatches: 0 (a micro-batch per train.grad_accum_steps)", true});
    if (s.kernels.cuda_graphs && !chosen.metric_names.empty())
      problems.push_back({"kernels.cuda_graphs", "cannot capture " + name + "'s step with its reward metrics",
                          "set kernels.cuda_graphs: false", true});
    if (t.per_device_batch_size == 0 && pairs)
      problems.push_back({"train.per_device_batch_size",
                          "is auto, and the batch finder tries windows of text, not the pairs " + name + " trains on",
                          "set the pairs per micro-batch (each pair is two rows of model.seq_len)", true});
    if (chosen.check)
      for (auto& p : chosen.check(t)) problems.push_back(std::move(p));
    return problems;
  }
};

}  // namespace

const RecipeRules& recipe_rules() {
  static const SpecObjectiveRules objectives;
  static const RecipeRules rules{architecture_rules(), optimizer_rules(), objectives};
  return rules;
}

std::string objective_name(TrainObjective name) {
  Settings s;
  s.train.objective = name;
  return settings_to_json(s)["train"]["objective"].get<std::string>();
}

namespace {

const char* field_name(BatchField f) {
  switch (f) {
    case BatchField::kInput:
      return "input tokens";
    case BatchField::kTarget:
      return "targets";
    case BatchField::kDocuments:
      return "document layout";
    case BatchField::kPairs:
      return "preference pairs";
    case BatchField::kReference:
      return "reference log-probabilities";
  }
  return "?";
}

bool carries(const Batch& b, BatchField f) {
  switch (f) {
    case BatchField::kInput:
      return b.input.defined();
    case BatchField::kTarget:
      return b.target.defined();
    case BatchField::kDocuments:
      return b.token_layout.defined();
    case BatchField::kPairs:
      return b.pairs > 0 && b.lengths.defined();
    case BatchField::kReference:
      return b.reference_logps.defined();
  }
  return false;
}

}  // namespace

void check_batch_fields(const ObjectiveSpec& objective, const Batch& b, const std::string& where) {
  for (BatchField f : objective.fields)
    if (!carries(b, f))
      throw runtime_error("train.objective: " + objective_name(objective.name) + " needs " + field_name(f) +
                          " in every batch, and " + where +
                          "'s batches have none\n    fix: choose data that gives "
                          "them, or another train.objective (docs/training.md, \"Objectives\")");
}

double inverse_unit_count(const ObjectiveSpec& objective, const std::vector<Batch>& micro_batches,
                          int64_t total_units) {
  int64_t units = total_units;
  if (units == 0)
    for (const auto& b : micro_batches) units += objective.units(b);
  return 1.0 / static_cast<double>(std::max<int64_t>(units, 1));
}

std::string objective_table_markdown() {
  std::string out = "| `train.objective` | reads | what it minimizes |\n|---|---|---|\n";
  for (const ObjectiveSpec* spec : objective_specs()) {
    std::string fields;
    for (BatchField f : spec->fields) fields += (fields.empty() ? "" : ", ") + std::string(field_name(f));
    out += "| `" + objective_name(spec->name) + "` | " + fields + " | " + spec->summary + " |\n";
  }
  return out;
}

}  // namespace gputrain
