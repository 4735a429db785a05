#include "model/linear.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

namespace gputrain {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    bias.uniform_(-bound, bound);
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor in = input_tap ? input_tap(x) : x;
  if (!output_tap) return at::linear(in, weight, bias);
  torch::Tensor y = output_tap(at::linear(in, weight));
  return bias.defined() ? y + bias : y;
}

}  // namespace gputrain
