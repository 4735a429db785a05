// tokenizer.json's "added_tokens" that are matched inside text: the
// non-special ones (Qwen2's "<tool_call>", say), found leftmost-longest with
// their lstrip / rstrip / single_word options as tokenizers' AddedVocabulary
// does. Special tokens are never matched in text (tokenizer.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gputrain {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {}
  bool empty() const { return tokens_.empty(); }

  struct Part {
    std::string_view text;  // a stretch of text, or empty with id >= 0
    int64_t id = -1;
  };
  // Cuts `text` into stretches of text and matched tokens, in order.
  void split(std::string_view text, std::vector<Part>& out) const;

 private:
  std::vector<AddedToken> tokens_;
};

}  // namespace gputrain
