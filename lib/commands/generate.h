// `gputrain generate`: text from a trained model (a run, a checkpoint or a Hugging Face folder),
// sampled token by token with a KV cache (model/gpt.h KvCache) and streamed as it comes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "config/settings.h"
#include "data/tokenizer.h"
#include "model/sampling.h"

namespace gputrain {

struct GenerateOptions {
  std::string where;        // a run's output folder, a checkpoint, or a Hugging Face model folder
  std::string prompt;       // text; framed as the training documents were (BOS, or GPT-2's end-of-text, first)
  TokenizerSpec tokenizer;  // empty name: the model's own (checkpoint/model_tokenizer.h)
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;  // temperature 0 = greedy
  uint64_t seed = 0;
  int64_t num_samples = 1;
  std::string device = "auto";            // auto | cpu | cuda | cuda:N
  QuantBase quantize = QuantBase::kNone;  // --quantize: generate with the block Linears in 4 bits
  bool json = false;                      // one JSON object at the end (ids included) instead of streamed text
};

// Writes the samples to `out`: streamed as each token is chosen (one sample), each in full after
// a header line (several), or as JSON. Throws data or usage Errors for what cannot be read or done.
void generate_text(const GenerateOptions& o, std::FILE* out);

}  // namespace gputrain
