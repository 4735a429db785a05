#include "data/jsonl_text.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace gputrain {

std::string jsonl_text(std::string_view line, const std::string& text_key, const std::function<std::string()>& place) {
  auto fail = [&](const std::string& why) {
    return data_error(place() + ": " + why + "\n    fix: each line must be a JSON object with a string under \"" +
                      text_key + "\" (choose the key with --text-key)");
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw fail("expected a JSON object, got " + std::string(j.type_name()));
  auto it = j.find(text_key);
  if (it == j.end()) throw fail("no \"" + text_key + "\" key");
  if (!it->is_string()) throw fail("\"" + text_key + "\" is " + std::string(it->type_name()) + ", not a string");
  return it->get<std::string>();
}

}  // namespace gputrain
