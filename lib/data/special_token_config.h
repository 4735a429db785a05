// Which special tokens frame documents: tokenizer_config.json beside the
// tokenizer file (bos_token, eos_token, pad_token, add_bos_token, as
// transformers writes it), then the --bos-token / --eos-token overrides.
#pragma once
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace gputrain {

struct SpecialTokenTexts {
  std::optional<std::string> bos, eos, pad;
  std::optional<bool> add_bos;  // unset = as the tokenizer itself does
};

// Throws a data Error naming tokenizer_config.json when it is malformed.
SpecialTokenTexts special_token_texts(const std::string& tokenizer_file, const TokenizerSpec& spec);

}  // namespace gputrain
