// tokenizer.json's "normalizer": NFC, NFD, NFKC, NFKD (utf8proc), Lowercase,
// Strip, StripAccents, Replace, Prepend and Sequence of them. Any other type
// is refused with its name.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/tokenizer_json_parts.h"

namespace gputrain {

class TextNormalizer {
 public:
  virtual ~TextNormalizer() = default;
  // Rewrites `s` (valid UTF-8) in place.
  virtual void apply(std::string& s) const = 0;
};

// nullptr for a null normalizer.
std::unique_ptr<TextNormalizer> make_normalizer(const nlohmann::json& j, const JsonPlace& place);

}  // namespace gputrain
