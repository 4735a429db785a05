// tokenizer.json's "decoder": token strings back to text (ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence), as
// the Hugging Face tokenizers library chains them. Any other type is refused
// with its name when the file is read.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer_json_parts.h"

namespace gputrain {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Rewrites the list of token strings (tokenizers' decode_chain).
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a null decoder (the tokens are concatenated).
std::unique_ptr<TokenDecoder> make_decoder(const nlohmann::json& j, const JsonPlace& place);

}  // namespace gputrain
