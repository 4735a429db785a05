// The GELU MLP's `gelu_tanh(c_fc(x))` with c_fc's bias added inside the
// activation kernel (kernels/bias_gelu.cuh), so that the backward reduces the
// bias gradient in the same pass that writes the activation's gradient.
// The MLP uses it on CUDA for a plain c_fc (no tensor-parallel taps, no LoRA);
// at::gelu(y + bias, "tanh") is the reference.
#pragma once
#include <torch/types.h>

namespace gputrain {

// True where the kernels take y (the product without bias, [..., width]) and the bias:
// CUDA build and tensors, y contiguous and 16-byte aligned, width a multiple of 8 (4 for fp32),
// the bias in fp32 or y's dtype.
bool fused_bias_gelu_available(const torch::Tensor& y, const torch::Tensor& bias);
// gelu_tanh(y + bias) in y's dtype.
torch::Tensor fused_bias_gelu(const torch::Tensor& y, const torch::Tensor& bias);

}  // namespace gputrain
