#include "model/sampling.h"

#include <ATen/ATen.h>

#include <limits>

namespace gputrain {

torch::Tensor filter_logits(const torch::Tensor& logits, const SamplingOptions& o) {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  torch::Tensor x = logits.to(at::kFloat) / o.temperature;
  if (o.top_k > 0 && o.top_k < x.size(-1)) {
    const torch::Tensor kth = std::get<0>(x.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    x = x.masked_fill(x < kth, minus_inf);
  }
  if (o.top_p < 1.0) {
    // As transformers: sorted ascending, drop the tokens whose cumulative probability stays at
    // or below 1 - p, always keeping the most likely one.
    auto [sorted, order] = x.sort(-1, /*descending=*/false);
    torch::Tensor drop = sorted.softmax(-1).cumsum(-1) <= (1.0 - o.top_p);
    drop.narrow(-1, drop.size(-1) - 1, 1).fill_(false);
    x = x.masked_fill(drop.scatter(-1, order, drop), minus_inf);
  }
  return x;
}

torch::Tensor choose_next_tokens(const torch::Tensor& logits, const SamplingOptions& o, at::Generator& generator) {
  if (o.temperature <= 0) return logits.argmax(-1);
  const torch::Tensor probs = filter_logits(logits, o).softmax(-1).to(at::kCPU);
  return at::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(-1).to(logits.device());
}

}  // namespace gputrain
