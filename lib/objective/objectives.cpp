#include "objective/objectives.h"

#include <stdexcept>

#include "config/schema.h"
#include "objective/causal_lm.h"
#include "util/error.h"

namespace gputrain {

const std::vector<const ObjectiveSpec*>& objective_specs() {
  static const std::vector<const ObjectiveSpec*> all = {
      &causal_lm_spec(),
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
