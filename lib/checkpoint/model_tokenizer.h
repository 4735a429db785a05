// The tokenizer a trained model reads text with (`gputrain generate`, `gputrain eval`'s bits per byte).
#pragma once
#include <memory>

#include "checkpoint/inference_model.h"
#include "data/tokenizer.h"

namespace gputrain {

// `chosen` when it names one (--tokenizer); else a Hugging Face folder's own tokenizer files; else
// what the run's data was prepared with: bytes for text data, the token shards' sidecar's
// tokenizer, or model.init_from's folder's. Throws a usage Error saying what to pass when there is
// none (synthetic data, GPT-2's files not given).
std::unique_ptr<Tokenizer> model_tokenizer(const InferenceModel& m, const TokenizerSpec& chosen);

// The token ids that end a generation: generation_config.json's (else config.json's)
// eos_token_id for a Hugging Face folder, else the tokenizer's end-of-text.
std::vector<int64_t> end_of_text_ids(const InferenceModel& m, const Tokenizer& tokenizer);

}  // namespace gputrain
