// A SentencePiece model (tokenizer.model: Llama 2, Mistral, Gemma), read and
// applied by the SentencePiece library itself (Debian's libsentencepiece),
// so ids are the reference ones. Control symbols spelled in the text
// ("<s>") are encoded as text, as SentencePiece does.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace gputrain {

// Throws a data Error naming the file when it is not a SentencePiece model.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path, const TokenizerSpec& spec);

}  // namespace gputrain
