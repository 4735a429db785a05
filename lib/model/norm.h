// The blocks' normalization: LayerNorm (GPT-2: scale and shift) or RMSNorm
// (Llama: scale only, no mean subtraction). One module for both so that the
// block, the pipeline stages and the checkpoint names (ln_1.weight, ...) do
// not depend on the architecture.
#pragma once
#include <torch/nn/module.h>

namespace gputrain {

enum class NormKind { kLayerNorm, kRmsNorm };

struct NormImpl : torch::nn::Module {
  NormImpl(NormKind kind, int64_t size, double eps);
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind;
  int64_t size;
  double eps;
  torch::Tensor weight;  // [size], initialized to 1
  torch::Tensor bias;    // [size], LayerNorm only (undefined for RMSNorm)
};
TORCH_MODULE(Norm);

}  // namespace gputrain
