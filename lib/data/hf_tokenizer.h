// A Hugging Face tokenizer.json (Llama 3, Qwen2, Mistral, Gemma, GPT-2 ...):
// added tokens, normalizer, pre-tokenizer, BPE model, post-processor and
// decoder, each read from the file (text_normalizer.h, pre_tokenizer.h,
// bpe_model.h, token_decoder.h). Ids equal the tokenizers library's with
// special tokens split (encode_special_tokens), on text made valid UTF-8
// the way Python's errors="replace" does (utf8_repair.h).
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace gputrain {

// Throws a data Error naming the file and the component for unreadable,
// malformed or unsupported contents.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const TokenizerSpec& spec);

}  // namespace gputrain
