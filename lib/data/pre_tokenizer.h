// tokenizer.json's "pre_tokenizer": splits normalized text into the pieces
// the BPE model merges within. ByteLevel, Split (PCRE2), Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer and Sequence,
// with the split behaviours of the Hugging Face tokenizers library; any other
// type is refused with its name.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer_json_parts.h"

namespace gputrain {

struct TextSegment {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the text given to encode (Metaspace's "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every segment by its pieces (empty pieces are dropped).
  virtual void split(std::vector<TextSegment>& segments) const = 0;
  // True for GPT-2's pre-tokenization (ByteLevel with its regex, no prefix
  // space), where text may be cut after a line break between two non-spaces.
  virtual bool splits_like_gpt2() const { return false; }
};

// nullptr for a null pre-tokenizer.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonPlace& place);

}  // namespace gputrain
