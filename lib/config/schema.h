// The recipe's schema: every key, its type, range, default and meaning, in
// one table (schema.cpp). Binding, dumping, unknown-key detection and the
// README's key reference are all driven by it, so a key is declared once.
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

struct FieldSpec {
  std::string path;  // "optim.lr"
  std::string type;  // "number > 0", "one of: cosine | linear | constant"
  std::string doc;
  std::function<void(Settings&, const ConfigNode&)> read;  // throws FieldProblem
  std::function<nlohmann::ordered_json(const Settings&)> write;
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

// A Markdown table of every key (type, default, meaning) for the README.
std::string schema_reference_markdown();

}  // namespace gputrain
