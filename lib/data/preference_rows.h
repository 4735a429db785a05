// One preference row of `data prepare --format preference`, in TRL's layouts:
//  - explicit prompt: "prompt", "chosen", "rejected", all strings, or all lists of
//    {role, content} (the completions then the assistant's turns);
//  - implicit prompt: "chosen" and "rejected" only, two whole texts or conversations whose shared
//    start is the prompt (TRL's extract_prompt). A string "prompt" beside two conversations
//    (UltraFeedback-binarized) is the conversations' first turn: the prompt is taken from them.
// Parsing and turning a row into token ids throw a data Error saying why, without the row's place.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_format.h"
#include "data/tokenizer.h"

namespace gputrain {

struct PreferenceRow {
  bool conversational = false;
  std::string prompt, chosen, rejected;                                 // text rows
  std::vector<ChatMessage> prompt_turns, chosen_turns, rejected_turns;  // conversational rows
};

PreferenceRow parse_preference_row(std::string_view json_line);

struct PreferenceIds {
  std::vector<uint32_t> prompt, chosen, rejected;
};

// How rows become ids: text rows as TRL tokenizes them (the tokenizer's BOS where it adds one, then
// prompt + completion as one text, the completion closed by EOS; the prompt is where the
// tokenizations of prompt and prompt + completion part); conversations rendered with `chat` (the
// completion: every token after the prompt's rendering, the turn's end included).
class PreferenceEncoder {
 public:
  PreferenceEncoder(const Tokenizer& tokenizer, std::optional<ChatTemplate> chat, std::string chat_date);
  PreferenceIds encode(const PreferenceRow& row);

 private:
  std::vector<uint32_t> text_ids(const std::string& text, bool close);
  // The ids of a conversation and where the turn after its first `prompt_turns` turns starts.
  std::vector<uint32_t> conversation_ids(const std::vector<ChatMessage>& turns, size_t prompt_turns, size_t& start);

  const Tokenizer& tokenizer_;
  std::unique_ptr<TokenEncoder> enc_;
  std::optional<ChatTemplate> chat_;
  std::string chat_date_;
};

// TRL's truncation: the prompt keeps its last `max_prompt_length` ids, then prompt + completion its
// first `max_length` (0 = no limit). Returns false for a pair whose prompt alone fills max_length
// (TRL drops those: no completion token would be left).
bool truncate_pair(PreferenceIds& ids, int64_t max_length, int64_t max_prompt_length);

}  // namespace gputrain
