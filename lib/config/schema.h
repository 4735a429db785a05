// The recipe's schema: every key, its type, range, default and meaning, in
// one table (schema.cpp). Binding, dumping, unknown-key detection and the
// recipe reference (docs/) are all driven by it, so a key is declared once.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/diagnostics.h"
#include "config/settings.h"
#include "config/tree.h"

namespace gputrain {

// Thrown by a field reader; binding turns it into a Diagnostic at the value's origin.
struct FieldProblem {
  std::string problem;
  std::string fix;
};

// What changing a key means when a run resumes from a checkpoint (train/resume.h).
enum class ResumePolicy {
  kDiverges,     // allowed, with a warning: the run no longer continues as the saved one would have
  kReported,     // allowed and logged: how long the run goes, how it reports or where it writes
  kRefused,      // the saved weights, optimizer state or data position depend on it
  kBatchSplit,   // another split of the global batch: reported while the global batch stays the same
  kWeightDtype,  // precision.mode: refused to or from bf16-pure (the saved weights' dtype), else diverges
};

struct FieldSpec {
  std::string path;  // "optim.lr"
  std::string type;  // "number > 0", "one of: cosine | linear | constant"
  std::string doc;
  std::function<void(Settings&, const ConfigNode&)> read;  // throws FieldProblem
  std::function<nlohmann::ordered_json(const Settings&)> write;
  ResumePolicy on_resume = ResumePolicy::kDiverges;
  nlohmann::ordered_json value_schema;  // the value's JSON Schema (config/json_schema.h)

  FieldSpec resume(ResumePolicy p) && {
    on_resume = p;
    return std::move(*this);
  }
};

const std::vector<FieldSpec>& schema();
const FieldSpec* find_field(const std::string& path);

// Fills `settings` from `root` (starting from the defaults already in it),
// recording each field's origin; unknown keys and bad values go to `diag`.
void bind_settings(const ConfigNode& root, Settings& settings, std::map<std::string, Origin>& origins,
                   Diagnostics& diag);

// The resolved settings as nested JSON in schema order (the source of both
// print-config formats and of the recipe hash).
nlohmann::ordered_json settings_to_json(const Settings& settings);

// docs/recipe-reference.md: every key (type, default, meaning), a Markdown table per section.
std::string schema_reference_markdown();

}  // namespace gputrain
