#include "data/tokenizer_json_parts.h"

#include "util/error.h"

namespace gputrain {

void refuse_component(const JsonPlace& place, const std::string& kind, const std::string& supported) {
  throw data_error(place.describe() + " is not a " + kind + " gputrain implements (it implements " + supported +
                   ")\n    fix: use a tokenizer built from those components, or its SentencePiece .model if it has "
                   "one; gputrain does not skip a component it cannot apply");
}

void bad_field(const JsonPlace& place, const std::string& key, const std::string& problem) {
  throw data_error(place.at("." + key) + " " + problem +
                   "\n    fix: pass a tokenizer.json written by the Hugging Face tokenizers library");
}

std::string component_type(const nlohmann::json& j, const JsonPlace& place) {
  if (!j.is_object()) throw data_error(place.describe() + " is not a JSON object\n    fix: check the file");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string())
    throw data_error(place.describe() +
                     " has no \"type\"\n    fix: pass a tokenizer.json written by the "
                     "Hugging Face tokenizers library");
  return it->get<std::string>();
}

std::string string_field(const nlohmann::json& j, const char* key, const JsonPlace& place,
                         const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) bad_field(place, key, "is " + std::string(it->type_name()) + ", not a string");
  return it->get<std::string>();
}

bool bool_field(const nlohmann::json& j, const char* key, const JsonPlace& place, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad_field(place, key, "is " + std::string(it->type_name()) + ", not true or false");
  return it->get<bool>();
}

int64_t int_field(const nlohmann::json& j, const char* key, const JsonPlace& place, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) bad_field(place, key, "is " + std::string(it->type_name()) + ", not an integer");
  return it->get<int64_t>();
}

const nlohmann::json& array_field(const nlohmann::json& j, const char* key, const JsonPlace& place) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) bad_field(place, key, "is missing or not a list");
  return *it;
}

TextPattern::TextPattern(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_object() && j.size() == 1 && j.begin().value().is_string()) {
    const std::string kind = j.begin().key(), text = j.begin().value().get<std::string>();
    if (kind == "String") {
      if (text.empty()) bad_field(place, "pattern", "is an empty string");
      literal_ = text;
      return;
    }
    if (kind == "Regex") {
      regex_ = std::make_unique<PcreRegex>(text, place.at(".pattern"));
      return;
    }
  }
  bad_field(place, "pattern", "is " + j.dump() + ", not {\"String\": ...} or {\"Regex\": ...}");
}

void TextPattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) return regex_->find_all(text, out);
  for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size()))
    out.emplace_back(at, at + literal_.size());
}

}  // namespace gputrain
