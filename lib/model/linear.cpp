#include "model/linear.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

#include "model/linear_bias_grad.h"
#include "model/meta_build.h"
#include "model/quantized_weight.h"
#include "model/weight_copy.h"

namespace gputrain {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, parameter_options()));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, parameter_options()));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    bias.uniform_(-bound, bound);
  }
}

void LinearImpl::add_lora(int64_t rank, double scale, double dropout) {
  lora_A = register_parameter("lora_A", torch::empty({rank, weight.size(1)}, weight.options()));
  lora_B = register_parameter("lora_B", torch::zeros({weight.size(0), rank}, weight.options()));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A, std::sqrt(5.0));
  lora_scale = scale;
  lora_dropout = dropout;
}

torch::Tensor LinearImpl::product_weight() const { return autocast_weight(weight, weight_copy); }

void LinearImpl::set_quantized(std::shared_ptr<const QuantizedWeight> w) {
  quantized = std::move(w);
  parameters_.erase("weight");
  weight = torch::Tensor();
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor in = input_tap ? input_tap(x) : x;
  torch::Tensor y;
  if (quantized) {
    y = quantized_linear(in, quantized);
    if (output_tap) y = output_tap(y);
    if (bias.defined()) y = y + bias.to(y.scalar_type());  // in the product's dtype, as at::linear under autocast
  } else if (!output_tap) {
    const torch::Tensor w = product_weight();
    y = linear_bias_grad_applies(in, bias) ? linear_with_bias_grad_kernel(in, w, bias) : at::linear(in, w, bias);
  } else {
    y = output_tap(at::linear(in, product_weight()));
    if (bias.defined()) y = y + bias;
  }
  if (!lora_A.defined() || lora_off) return y;
  const torch::Tensor& lora_in = lora_tap ? x : in;
  const torch::Tensor a_in =
      lora_dropout > 0 && is_training() ? at::dropout(lora_in, lora_dropout, /*train=*/true) : lora_in;
  const torch::Tensor h = at::linear(a_in, lora_A);
  return y + at::linear(lora_tap ? lora_tap(h) : h, lora_B) * lora_scale;
}

}  // namespace gputrain
