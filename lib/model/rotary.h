// Rotary position embeddings (RoPE, Su et al. 2021) in Llama's "rotate half"
// layout, as Hugging Face's LlamaAttention computes them: dimension i of a
// head is rotated together with dimension i + D/2, by the angle
// position x theta^(-2i/D). Exported q/k weights therefore need no permutation.
#pragma once
#include <torch/types.h>

#include <map>
#include <tuple>

#include "config/settings.h"

namespace gputrain {

class RotaryEmbedding {
 public:
  // The head width, base and scaling of `m` (model/rope_scaling.h).
  explicit RotaryEmbedding(const ModelSettings& m);
  // x [B, H, T, D] at positions offset..offset+T-1 -> the rotated x (same dtype). A nonzero
  // offset: the new tokens of a generation step (model/gpt.h KvCache).
  torch::Tensor apply(const torch::Tensor& x, int64_t offset = 0);
  // x [B, H, T, D] at positions [B, T] int64 of a sequence of max(T, model.seq_len) tokens (packed
  // documents restart at 0; context parallelism's chunks are at their places in the whole sequence).
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions);

 private:
  // cos and sin [T, D/2] in x's dtype on x's device. Not thread-safe: one
  // model (all its blocks share this object) runs on one thread.
  std::pair<torch::Tensor, torch::Tensor> tables(int64_t T, const torch::Tensor& like);
  // x rotated by the angles' cos and sin (broadcast to x).
  static torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  int64_t head_dim_;
  double theta_;
  RopeScalingSettings scaling_;
  int64_t max_positions_;
  int64_t seq_len_;  // model.seq_len: the sequence length positions count in
  // Per device and dtype: the tables and the length they were made for.
  struct Tables {
    torch::Tensor cos, sin;
    int64_t length = 0;
  };
  std::map<std::tuple<c10::DeviceType, int, c10::ScalarType>, Tables> cache_;
};

}  // namespace gputrain
