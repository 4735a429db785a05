// Helpers shared by the readers of tokenizer.json's components (normalizer,
// pre-tokenizer, model, post-processor, decoder): typed field access with
// errors that name the file and the component, and the {"String"|"Regex"}
// pattern both Replace and Split use.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/pcre_regex.h"

namespace gputrain {

// Where a component sits, for messages: "tokenizer.json 'PATH' pre_tokenizer.pretokenizers[1] (Split)".
struct JsonPlace {
  std::string file;  // the tokenizer.json path
  std::string path;  // e.g. "normalizer.normalizers[0]"
  std::string at(const std::string& child) const { return JsonPlace{file, path + child}.describe(); }
  JsonPlace child(const std::string& suffix) const { return {file, path + suffix}; }
  std::string describe() const { return "tokenizer.json '" + file + "' " + path; }
};

// A data Error: the component at `place` (whose path names its type) is not a
// `kind` ("normalizer", ...) gputrain implements; `supported` lists those it does.
[[noreturn]] void refuse_component(const JsonPlace& place, const std::string& kind, const std::string& supported);
// A data Error for a malformed field.
[[noreturn]] void bad_field(const JsonPlace& place, const std::string& key, const std::string& problem);

// The component's "type" (a data Error when absent).
std::string component_type(const nlohmann::json& j, const JsonPlace& place);
// Typed optional fields: `fallback` when absent or null, a data Error when of another type.
std::string string_field(const nlohmann::json& j, const char* key, const JsonPlace& place, const std::string& fallback);
bool bool_field(const nlohmann::json& j, const char* key, const JsonPlace& place, bool fallback);
int64_t int_field(const nlohmann::json& j, const char* key, const JsonPlace& place, int64_t fallback);
const nlohmann::json& array_field(const nlohmann::json& j, const char* key, const JsonPlace& place);

// {"String": "x"} (a literal) or {"Regex": "..."} (PCRE2).
class TextPattern {
 public:
  TextPattern(const nlohmann::json& j, const JsonPlace& place);
  // Appends the [begin, end) ranges of non-overlapping matches, leftmost first.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string literal_;
  std::unique_ptr<PcreRegex> regex_;
};

}  // namespace gputrain
