// A linear layer on CUDA whose backward reduces the bias gradient with our
// column-sum kernels (kernels/column_sum.cuh) instead of ATen's sum over the
// rows, which ran at a third of the memory bandwidth for GPT-2's layers.
// The forward is at::linear's own (cuBLAS, the bias in its epilogue) and the
// backward's two products are the ones ATen's would run; under CUDA autocast
// the inputs are cast as autocast casts them (its weight cache included).
// LinearImpl uses it for CUDA inputs with a bias; at::linear is the reference.
#pragma once
#include <torch/types.h>

namespace gputrain {

// True in the CUDA build for CUDA tensors with a bias.
bool linear_bias_grad_applies(const torch::Tensor& x, const torch::Tensor& bias);
// x W^T + b.
torch::Tensor linear_with_bias_grad_kernel(const torch::Tensor& x, const torch::Tensor& weight,
                                           const torch::Tensor& bias);
// The bias gradient of such a layer from its output gradient g [rows, out]: g's column sums in
// g's dtype (rounded once, as ATen's sum(0) rounds), by the kernels where they take g and by
// ATen's sum elsewhere. The backward above uses it; `gputrain kernels bench` times it.
torch::Tensor linear_bias_gradient(const torch::Tensor& g);

}  // namespace gputrain
