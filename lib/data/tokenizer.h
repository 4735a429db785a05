// Text -> token ids for `gputrain data prepare`.
//   bytes: one token per byte (ids 0..255), end-of-document id 256.
//   gpt2:  GPT-2's byte-level BPE, read from its vocabulary (encoder.json)
//          and merges (vocab.bpe) files; ids equal HF tokenizers' for the
//          same pair of files. End-of-document is "<|endoftext|>".
// A Tokenizer is immutable and shared; each thread encodes through its own
// TokenEncoder, which keeps a private cache of already-merged words.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gputrain {

class TokenEncoder {
 public:
  virtual ~TokenEncoder() = default;
  // Appends the ids of `text` to `out`. Special-token text such as
  // "<|endoftext|>" inside `text` is encoded as ordinary text.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual uint32_t eot_id() const = 0;  // end-of-document token
  virtual std::unique_ptr<TokenEncoder> make_encoder() const = 0;
  // The bytes of the ids (the inverse of encode for text without special tokens).
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
};

struct TokenizerSpec {
  std::string name;         // bytes | gpt2
  std::string vocab_path;   // gpt2: encoder.json
  std::string merges_path;  // gpt2: vocab.bpe
};

// Throws a usage Error for an unknown name and a data Error naming the file
// for a missing or malformed vocabulary/merges file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);

}  // namespace gputrain
