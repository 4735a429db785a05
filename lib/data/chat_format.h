// Chat / instruction rows for `data prepare --format chat`: a JSON object
// with "messages": [{"role": system|user|assistant, "content": "..."}, ...]
// or with "prompt" and "completion" strings, rendered by a built-in chat
// template into pieces of text and special tokens, each marked whether it
// takes loss: the assistant's (completion's) content and the token that
// ends its turn do; the prompt, roles and headers do not.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gputrain {

enum class ChatTemplate { kChatml, kQwen25, kLlama3, kLlama31, kMistral, kMistralV03, kPlain };

// Every template's name (chatml, qwen2.5, llama3, llama3.1, mistral, mistral-v0.3, plain).
const std::vector<std::string>& chat_template_names();
// The template of that name; throws a usage Error naming them for another.
ChatTemplate chat_template_named(const std::string& name);
const char* chat_template_name(ChatTemplate t);

// What Llama 3.1's template writes as "Today Date" unless given another date.
inline constexpr const char* kLlama31DefaultDate = "26 Jul 2024";

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// The messages of one row; throws a data Error (the why, without the place)
// for a row that is not a chat row, has an unknown role or no assistant turn.
// render_chat throws one for a row its template cannot write (the mistral templates need user and
// assistant turns to alternate).
std::vector<ChatMessage> parse_chat_row(std::string_view json_line);

struct ChatPiece {
  enum class Kind { kText, kSpecial, kEndOfText };
  Kind kind = Kind::kText;
  std::string text;      // kText: text to encode; kSpecial: the special token's text ("<|im_start|>")
  bool trained = false;  // its tokens take loss
};

// `is_special(text)`: whether the tokenizer has that special token (mistral's [INST] is one
// in newer vocabularies, text in older ones). kEndOfText is the tokenizer's end-of-text id,
// which closes the assistant's turn in the mistral and plain templates. `today` is llama3.1's
// "Today Date" line.
std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   const std::function<bool(const std::string&)>& is_special,
                                   const std::string& today = kLlama31DefaultDate);

// The template a tokenizer's own special tokens suggest: llama3.1 (<|eom_id|>, which Llama 3.1 added),
// llama3, chatml, mistral-v0.3 ([INST] as a special token, from Mistral's v3 vocabularies on), else plain.
ChatTemplate default_chat_template(const std::function<bool(const std::string&)>& is_special);

}  // namespace gputrain
