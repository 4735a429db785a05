// Rotary position embeddings (RoPE, Su et al. 2021) in Llama's "rotate half"
// layout, as Hugging Face's LlamaAttention computes them: dimension i of a
// head is rotated together with dimension i + D/2, by the angle
// position x theta^(-2i/D). Exported q/k weights therefore need no permutation.
#pragma once
#include <torch/types.h>

#include <map>
#include <tuple>

namespace gputrain {

class RotaryEmbedding {
 public:
  RotaryEmbedding(int64_t head_dim, double theta);
  // x [B, H, T, D] at positions 0..T-1 -> the rotated x (same dtype).
  torch::Tensor apply(const torch::Tensor& x);

 private:
  // cos and sin [T, D/2] in x's dtype on x's device. Not thread-safe: one
  // model (all its blocks share this object) runs on one thread.
  std::pair<torch::Tensor, torch::Tensor> tables(int64_t T, const torch::Tensor& like);

  int64_t head_dim_;
  double theta_;
  std::map<std::tuple<c10::DeviceType, int, c10::ScalarType>, std::pair<torch::Tensor, torch::Tensor>> cache_;
};

// The inverse frequencies theta^(-2i/D), i = 0..D/2-1, in float64 (tests and the tables).
torch::Tensor rotary_inverse_frequencies(int64_t head_dim, double theta);

}  // namespace gputrain
