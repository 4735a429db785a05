#include "model/linear_bias_grad.h"

#include <c10/util/Exception.h>

namespace gputrain {

#ifndef GPUTRAIN_WITH_CUDA  // else in linear_bias_grad_cuda.cpp
bool linear_bias_grad_applies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor linear_with_bias_grad_kernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  TORCH_CHECK(false, "the linear layer's bias-gradient kernel needs the CUDA build");
}
torch::Tensor linear_bias_gradient(const torch::Tensor&) {
  TORCH_CHECK(false, "the linear layer's bias-gradient kernel needs the CUDA build");
}
#endif

}  // namespace gputrain
