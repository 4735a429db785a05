// tokenizer.json's BPE "model": the vocabulary, the ranked merges and the
// options the Llama, Qwen, Mistral and GPT-2 families use (byte_fallback,
// ignore_merges, unk_token / fuse_unk, continuing_subword_prefix,
// end_of_word_suffix). Merging follows tokenizers' BPE::merge_word exactly.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer_json_parts.h"

namespace gputrain {

class BpeModel {
 public:
  BpeModel(const nlohmann::json& model, const JsonPlace& place);

  // Appends the ids of one pre-token.
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const;

  std::optional<uint32_t> id_of(std::string_view token) const;
  // The token string of `id`, nullptr when the vocabulary has none.
  const std::string* token_of(uint32_t id) const;
  int64_t id_limit() const { return static_cast<int64_t>(tokens_.size()); }  // 1 + the largest id

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    uint32_t rank;
    uint32_t result;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  const Merge* merge_of(uint32_t a, uint32_t b) const;

  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> vocab_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;
  std::array<int64_t, 256> byte_ids_{};  // "<0xNN>" tokens, -1 where absent
  bool all_byte_ids_ = false;
};

}  // namespace gputrain
