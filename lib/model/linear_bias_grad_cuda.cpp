// The autograd function: forward saves the (cast) input and weight as
// ATen's linear does; backward runs grad_out W and grad_out^T x as at::mm and
// the bias gradient as column partial sums + their sum, in the bias's dtype.
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "model/kernel_glue_cuda.h"
#include "model/linear_bias_grad.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Column sums of a [rows, cols] matrix in fp32; ATen's where the kernel does not take it.
at::Tensor column_sums(const at::Tensor& m) {
  const auto type = kernel_float_type(m.scalar_type());
  if (!type || !m.is_contiguous() || !aligned16(m) || !kernels::column_partial_sums_supported(*type, m.size(1)))
    return m.sum(0, /*keepdim=*/false, at::kFloat);
  at::Tensor partial = at::empty({kernels::column_partial_rows(m.size(0)), m.size(1)}, m.options().dtype(at::kFloat));
  kernels::launch_column_partial_sums(m.data_ptr(), *type, m.size(0), m.size(1), partial.data_ptr<float>(),
                                      kernel_stream(m));
  return column_sum(partial);
}

struct LinearBiasGrad : torch::autograd::Function<LinearBiasGrad> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({x, weight});
    return at::linear(x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    const int64_t out = weight.size(0), in = weight.size(1);
    const at::Tensor g = grads[0].reshape({-1, out}).contiguous();
    at::Tensor grad_x, grad_w, grad_b;
    if (ctx->needs_input_grad(0)) grad_x = at::mm(g, weight).view(x.sizes());
    if (ctx->needs_input_grad(1)) grad_w = at::mm(g.t(), x.reshape({-1, in}));
    if (ctx->needs_input_grad(2)) grad_b = linear_bias_gradient(g);
    return {grad_x, grad_w, grad_b};
  }
};

}  // namespace

torch::Tensor linear_bias_gradient(const torch::Tensor& g) { return column_sums(g).to(g.scalar_type()); }

bool linear_bias_grad_applies(const torch::Tensor& x, const torch::Tensor& bias) {
  return x.is_cuda() && bias.defined() && x.dim() >= 1;
}

torch::Tensor linear_with_bias_grad_kernel(const torch::Tensor& x, const torch::Tensor& weight,
                                           const torch::Tensor& bias) {
  if (at::autocast::is_autocast_enabled(at::kCUDA)) {
    const at::ScalarType t = at::autocast::get_autocast_dtype(at::kCUDA);
    return LinearBiasGrad::apply(at::autocast::cached_cast(t, x, at::kCUDA),
                                 at::autocast::cached_cast(t, weight, at::kCUDA),
                                 at::autocast::cached_cast(t, bias, at::kCUDA));
  }
  return LinearBiasGrad::apply(x, weight, bias);
}

}  // namespace gputrain
