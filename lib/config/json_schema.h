// The recipe as a JSON Schema (draft 2020-12), generated from the schema table (config/schema.h)
// that validation reads: every key with its type, enum values, range, default and meaning, unknown
// keys refused (additionalProperties: false), `extends` allowed. Editors with a YAML language server
// complete and check recipes with it; docs/recipe.schema.json is its output.
#pragma once
#include <nlohmann/json.hpp>

namespace gputrain {

nlohmann::ordered_json recipe_json_schema();

}  // namespace gputrain
