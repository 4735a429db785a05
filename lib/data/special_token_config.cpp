#include "data/special_token_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {

SpecialTokenTexts special_token_texts(const std::string& tokenizer_file, const TokenizerSpec& spec) {
  SpecialTokenTexts t;
  const auto config = std::filesystem::path(tokenizer_file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    const std::string path = config.string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(path, "tokenizer config"));
    } catch (const nlohmann::json::exception& e) {
      throw data_error("tokenizer config '" + path + "' is not valid JSON: " + e.what() +
                       "\n    fix: repair or remove it (it names the BOS/EOS tokens)");
    }
    // A token is "text" or {"content": "text", ...} (an AddedToken).
    auto text = [&](const char* key) -> std::optional<std::string> {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) return std::nullopt;
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
      throw data_error("tokenizer config '" + path + "': \"" + key + "\" is " + it->dump() +
                       ", not a token's text\n    fix: write it as \"" + key + "\": \"<token text>\"");
    };
    t.bos = text("bos_token"), t.eos = text("eos_token"), t.pad = text("pad_token");
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) t.add_bos = j["add_bos_token"].get<bool>();
  }
  if (spec.bos_token == "none") {
    t.add_bos = false;
  } else if (!spec.bos_token.empty()) {
    t.bos = spec.bos_token, t.add_bos = true;
  }
  if (!spec.eos_token.empty()) t.eos = spec.eos_token;
  return t;
}

}  // namespace gputrain
