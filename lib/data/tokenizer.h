// Text -> token ids for `gputrain data prepare`.
//   bytes:  one token per byte (ids 0..255), end-of-document id 256.
//   gpt2:   GPT-2's byte-level BPE from its encoder.json + vocab.bpe; ids
//           equal HF tokenizers' for the same pair of files.
//   a path: a Hugging Face tokenizer.json (hf_tokenizer.h), a SentencePiece
//           .model (sentencepiece_tokenizer.h), or a model folder holding
//           either (tokenizer.json first).
// Text that spells a special token ("<|endoftext|>", "</s>") is encoded as
// ordinary text: special ids come only from the document framing.
// A Tokenizer is immutable and shared; each thread encodes through its own
// TokenEncoder, which keeps private caches.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gputrain {

class TokenEncoder {
 public:
  virtual ~TokenEncoder() = default;
  // Appends the ids of `text` (one document, or the start of one) to `out`.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) = 0;
  // The same for text that follows a special token inside a document (a chat template's pieces), as
  // Hugging Face encodes a segment after an added token: no prefix that marks a document's first word.
  virtual void encode_continuation(std::string_view text, std::vector<uint32_t>& out) { encode(text, out); }
};

// The special ids around every document in the shards. Tokenizers that add a
// beginning-of-sequence token (Llama, Mistral, Gemma) frame documents as
// BOS text EOS; the others (GPT-2, Qwen2, bytes) write their end-of-text
// token before each document (llm.c's convention). Either way `before` is
// not empty, and its first id is what the loader treats as a document start.
struct DocumentFraming {
  std::vector<uint32_t> before, after;
  int64_t bos = -1, eos = -1, pad = -1;  // the tokenizer's own ids, -1 = none
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;                   // bytes | gpt2 | tokenizer.json | sentencepiece
  virtual std::string name() const = 0;                   // the kind, or the absolute path of the tokenizer file
  virtual std::string file_crc32c() const { return ""; }  // hex CRC-32C of the tokenizer file(s), "" if none
  virtual int64_t vocab_size() const = 0;                 // 1 + the largest id it can produce
  virtual const DocumentFraming& framing() const = 0;
  uint32_t document_start_id() const { return framing().before.front(); }
  virtual std::unique_ptr<TokenEncoder> make_encoder() const = 0;
  // The id of a special token by its text ("<|im_start|>"), if the tokenizer has it as one.
  virtual std::optional<uint32_t> special_id(const std::string& /*text*/) const { return std::nullopt; }
  // The bytes of the ids (the inverse of encode for valid UTF-8 text).
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  // A byte offset in [target, target + window) where a document's text may
  // be cut and its halves encoded apart with the same ids as the whole, or
  // npos if there is none (then documents are never cut).
  virtual size_t safe_split_point(std::string_view text, size_t target, size_t window) const;
};

struct TokenizerSpec {
  std::string name;         // bytes | gpt2 | a path (tokenizer.json, *.model, or a folder)
  std::string vocab_path;   // gpt2: encoder.json
  std::string merges_path;  // gpt2: vocab.bpe
  // Overrides of the framing's special tokens, by their text: "" = the
  // tokenizer's own (tokenizer_config.json, the post-processor); "none" = no BOS.
  std::string bos_token, eos_token;
};

// Throws a usage Error for an unknown name and a data Error naming the file
// for a missing, malformed or unsupported tokenizer file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);

// The framing rule above, shared by the tokenizers: `adds_bos` when the
// tokenizer puts BOS before a sequence; `where` names the tokenizer in errors.
DocumentFraming frame_documents(bool adds_bos, int64_t bos, int64_t eos, int64_t pad, const std::string& where);

}  // namespace gputrain
