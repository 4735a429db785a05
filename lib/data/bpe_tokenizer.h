// GPT-2's byte-level BPE (see tokenizer.h).
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace gputrain {

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const std::string& vocab_json_path, const std::string& merges_path);
  std::string kind() const override { return "gpt2"; }
  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  const DocumentFraming& framing() const override { return framing_; }
  std::optional<uint32_t> special_id(const std::string& text) const override {
    if (text == "<|endoftext|>") return static_cast<uint32_t>(framing_.eos);
    return std::nullopt;
  }
  std::unique_ptr<TokenEncoder> make_encoder() const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  size_t safe_split_point(std::string_view text, size_t target, size_t window) const override;

  // Merges the bytes of one pre-token into ids, lowest merge rank first.
  void merge_word(std::string_view word, std::vector<uint32_t>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t result;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

  std::vector<std::string> id_to_bytes_;
  uint32_t byte_id_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;
  DocumentFraming framing_;
};

}  // namespace gputrain
