// The blocks' `h = x + branch; y = norm(h)` as one CUDA kernel each way
// (kernels/add_norm.cuh), behind autograd functions. NormImpl uses them where
// fused_norm_available says so and ATen's ops otherwise (the reference the
// GPU tests compare with). Under CUDA autocast the normalized output is
// written in autocast's dtype, which every consumer (a linear layer) would
// cast it to anyway.
#pragma once
#include <torch/types.h>

#include <optional>
#include <utility>

namespace gputrain {

struct FusedNormParams {
  torch::Tensor weight;
  std::optional<torch::Tensor> bias;  // LayerNorm's; none for RMSNorm
  double eps = 1e-5;
  bool rms = false;
};

// The dtype the normalized output gets: CUDA autocast's where it is enabled, else x's.
at::ScalarType fused_norm_output_dtype(const torch::Tensor& x);

// True where the kernels take these tensors: CUDA build, CUDA tensors of a
// supported dtype combination and width, weight (and bias) in x's dtype.
// `branch` may be undefined (normalization alone).
bool fused_norm_available(const torch::Tensor& x, const torch::Tensor& branch, const FusedNormParams& p);

// norm(x), in fused_norm_output_dtype(x).
torch::Tensor fused_norm(const torch::Tensor& x, const FusedNormParams& p);
// {x + branch (x's dtype), norm(x + branch)}.
std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor& x, const torch::Tensor& branch,
                                                       const FusedNormParams& p);

}  // namespace gputrain
