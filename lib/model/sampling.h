// Choosing the next token from a model's logits (`gputrain generate`): greedy, or sampling with
// temperature, top-k and top-p applied in transformers' order (its TemperatureLogitsWarper,
// TopKLogitsWarper, TopPLogitsWarper), so a seed's choices follow the same distribution.
#pragma once
#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace gputrain {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (the most likely token)
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the fewest most likely tokens whose probability reaches p; 1 = all
};

// logits [B, V] (float) -> divided by the temperature, with -inf where top-k or top-p removes a token.
torch::Tensor filter_logits(const torch::Tensor& logits, const SamplingOptions& o);

// The next token of each row of logits [B, V]: argmax when greedy, else drawn from the filtered
// distribution with `generator` (a CPU generator: the same seed draws the same tokens on any device).
torch::Tensor choose_next_tokens(const torch::Tensor& logits, const SamplingOptions& o, at::Generator& generator);

}  // namespace gputrain
