// Autograd function over the bias + GELU kernels: forward saves the product
// and the bias (no activation-sized tensor beyond the product, as ATen's
// gelu saves its input); backward writes d y and sums the kernel's per-chunk
// bias partials.
#include <torch/autograd.h>

#include "bias_gelu.cuh"
#include "model/fused_bias_gelu.h"
#include "model/kernel_glue_cuda.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::BiasGeluArgs bias_gelu_args(const at::Tensor& y, const at::Tensor& bias) {
  kernels::BiasGeluArgs a;
  a.y = y.data_ptr();
  a.bias = bias.data_ptr();
  a.width = y.size(-1);
  a.rows = y.numel() / a.width;
  a.y_type = *kernel_float_type(y.scalar_type());
  a.bias_type = *kernel_float_type(bias.scalar_type());
  return a;
}

struct FusedBiasGelu : torch::autograd::Function<FusedBiasGelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& bias_in) {
    const at::Tensor bias = bias_in.contiguous();
    at::Tensor out = at::empty_like(y, at::MemoryFormat::Contiguous);
    kernels::launch_bias_gelu_forward(bias_gelu_args(y, bias), out.data_ptr(), kernel_stream(y));
    ctx->save_for_backward({y, bias});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &y = saved[0], &bias = saved[1];
    const at::Tensor grad_out = grads[0].to(y.scalar_type()).contiguous();
    at::Tensor grad_y = at::empty_like(y, at::MemoryFormat::Contiguous);
    const auto a = bias_gelu_args(y, bias);
    at::Tensor partial =
        at::empty({kernels::bias_gelu_backward_chunks(a.rows), a.width}, y.options().dtype(at::kFloat));
    kernels::launch_bias_gelu_backward(a, grad_out.data_ptr(), grad_y.data_ptr(), partial.data_ptr<float>(),
                                       kernel_stream(y));
    return {grad_y, column_sum(partial).to(bias.scalar_type())};
  }
};

}  // namespace

bool fused_bias_gelu_available(const torch::Tensor& y, const torch::Tensor& bias) {
  if (!y.is_cuda() || !bias.defined() || !bias.is_cuda() || y.dim() < 1 || !y.is_contiguous() || !aligned16(y) ||
      bias.dim() != 1 || bias.size(0) != y.size(-1))
    return false;
  const auto yt = kernel_float_type(y.scalar_type()), bt = kernel_float_type(bias.scalar_type());
  return yt && bt && kernels::bias_gelu_supported(*yt, *bt, y.size(-1));
}

torch::Tensor fused_bias_gelu(const torch::Tensor& y, const torch::Tensor& bias) {
  return FusedBiasGelu::apply(y, bias);
}

}  // namespace gputrain
