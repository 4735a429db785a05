// The blocks' normalization: LayerNorm (GPT-2: scale and shift) or RMSNorm
// (Llama: scale only, no mean subtraction). One module for both so that the
// block, the pipeline stages and the checkpoint names (ln_1.weight, ...) do
// not depend on the architecture. On CUDA the residual add that precedes a
// norm and the norm itself run as one fused kernel (model/fused_norm.h).
#pragma once
#include <torch/nn/module.h>

#include <utility>

namespace gputrain {

enum class NormKind { kLayerNorm, kRmsNorm };

struct NormImpl : torch::nn::Module {
  NormImpl(NormKind kind, int64_t size, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  // {h, norm(h)} with h = x + branch (branch undefined: h = x), the pre-norm
  // blocks' residual step. Fused on CUDA; ATen's add and norm elsewhere.
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x, const torch::Tensor& branch);
  // ATen's norm alone: the CPU path and the fused kernels' reference.
  torch::Tensor reference_forward(const torch::Tensor& x);

  NormKind kind;
  int64_t size;
  double eps;
  torch::Tensor weight;  // [size], initialized to 1
  torch::Tensor bias;    // [size], LayerNorm only (undefined for RMSNorm)
};
TORCH_MODULE(Norm);

}  // namespace gputrain
