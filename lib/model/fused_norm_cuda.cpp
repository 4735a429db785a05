// Autograd functions over the add + norm kernels. Forward saves what the
// normalization read (the sum, or x), the weight and the per-row statistics;
// backward writes the input's gradient (plus the residual path's, for the
// sum) and reduces the weight/bias gradients from the kernel's per-block
// partial rows.
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "add_norm.cuh"
#include "model/fused_norm.h"
#include "model/kernel_glue_cuda.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The forward of both functions: `branch` undefined = normalize x alone.
// Returns {sum (undefined without a branch), out, mean (LayerNorm), rstd}.
std::array<at::Tensor, 4> forward_kernel(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, double eps, bool rms,
                                         at::ScalarType out_dtype) {
  const int64_t width = x.size(-1), rows = x.numel() / width;
  const auto f32 = x.options().dtype(at::kFloat);
  std::array<at::Tensor, 4> r;
  if (branch.defined()) r[0] = at::empty_like(x);
  r[1] = at::empty(x.sizes(), x.options().dtype(out_dtype));
  if (!rms) r[2] = at::empty({rows}, f32);
  r[3] = at::empty({rows}, f32);
  kernels::AddNormForwardArgs a;
  a.x = x.data_ptr();
  a.branch = branch.defined() ? branch.data_ptr() : nullptr;
  a.sum = branch.defined() ? r[0].data_ptr() : nullptr;
  a.out = r[1].data_ptr();
  a.weight = weight.data_ptr();
  a.bias = bias && bias->defined() ? bias->data_ptr() : nullptr;
  a.mean = rms ? nullptr : r[2].data_ptr<float>();
  a.rstd = r[3].data_ptr<float>();
  a.rows = rows;
  a.width = width;
  a.eps = static_cast<float>(eps);
  a.rms = rms;
  a.residual = *kernel_float_type(x.scalar_type());
  a.out_type = *kernel_float_type(out_dtype);
  a.branch_type = branch.defined() ? *kernel_float_type(branch.scalar_type()) : a.out_type;
  kernels::launch_add_norm_forward(a, kernel_stream(x));
  return r;
}

// {d input (+ grad_sum), d branch (when branch_dtype differs from the input's; else undefined), d weight, d bias}.
std::array<at::Tensor, 4> backward_kernel(const at::Tensor& grad_out_in, const at::Tensor& grad_sum_in,
                                          const at::Tensor& input, const at::Tensor& weight, const at::Tensor& mean,
                                          const at::Tensor& rstd, bool has_bias, bool rms,
                                          std::optional<at::ScalarType> branch_dtype) {
  const int64_t width = input.size(-1), rows = input.numel() / width;
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor grad_sum = grad_sum_in.defined() ? grad_sum_in.to(input.scalar_type()).contiguous() : at::Tensor();
  const bool separate_branch = branch_dtype && *branch_dtype != input.scalar_type();
  std::array<at::Tensor, 4> r;
  r[0] = at::empty_like(input);
  if (separate_branch) r[1] = at::empty(input.sizes(), input.options().dtype(*branch_dtype));
  const int64_t blocks = kernels::add_norm_backward_blocks(rows);
  const auto f32 = input.options().dtype(at::kFloat);
  at::Tensor weight_partial = at::empty({blocks, width}, f32);
  at::Tensor bias_partial = has_bias ? at::empty({blocks, width}, f32) : at::Tensor();
  kernels::AddNormBackwardArgs a;
  a.grad_out = grad_out.data_ptr();
  a.grad_sum = grad_sum.defined() ? grad_sum.data_ptr() : nullptr;
  a.input = input.data_ptr();
  a.weight = weight.data_ptr();
  a.mean = rms ? nullptr : mean.data_ptr<float>();
  a.rstd = rstd.data_ptr<float>();
  a.grad_input = r[0].data_ptr();
  a.grad_branch = separate_branch ? r[1].data_ptr() : nullptr;
  a.weight_partial = weight_partial.data_ptr<float>();
  a.bias_partial = has_bias ? bias_partial.data_ptr<float>() : nullptr;
  a.rows = rows;
  a.width = width;
  a.rms = rms;
  a.residual = *kernel_float_type(input.scalar_type());
  a.out_type = *kernel_float_type(grad_out.scalar_type());
  a.branch_type = branch_dtype ? *kernel_float_type(*branch_dtype) : a.out_type;
  kernels::launch_add_norm_backward(a, kernel_stream(input));
  r[2] = column_sum(weight_partial).to(weight.scalar_type());
  if (has_bias) r[3] = column_sum(bias_partial).to(weight.scalar_type());
  return r;
}

void save_common(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& mean,
                 const at::Tensor& rstd, bool has_bias, bool rms) {
  ctx->save_for_backward({input, weight, mean, rstd});
  ctx->saved_data["has_bias"] = has_bias;
  ctx->saved_data["rms"] = rms;
}

struct FusedNorm : torch::autograd::Function<FusedNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, double eps, bool rms, int64_t out_dtype) {
    auto r = forward_kernel(x, at::Tensor(), weight, bias, eps, rms, static_cast<at::ScalarType>(out_dtype));
    save_common(ctx, x, weight, r[2], r[3], bias && bias->defined(), rms);
    return r[1];
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    auto r = backward_kernel(grads[0], at::Tensor(), s[0], s[1], s[2], s[3], has_bias, ctx->saved_data["rms"].toBool(),
                             std::nullopt);
    return {r[0], r[2], r[3], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FusedAddNorm : torch::autograd::Function<FusedAddNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const at::Tensor& weight, const std::optional<at::Tensor>& bias, double eps, bool rms,
                               int64_t out_dtype) {
    auto r = forward_kernel(x, branch, weight, bias, eps, rms, static_cast<at::ScalarType>(out_dtype));
    save_common(ctx, r[0], weight, r[2], r[3], bias && bias->defined(), rms);
    ctx->saved_data["branch_dtype"] = static_cast<int64_t>(branch.scalar_type());
    return {r[0], r[1]};
  }
  // grads: {d sum (its later uses: the residual path), d out}.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto branch_dtype = static_cast<at::ScalarType>(ctx->saved_data["branch_dtype"].toInt());
    auto r = backward_kernel(grads[1], grads[0], s[0], s[1], s[2], s[3], has_bias, ctx->saved_data["rms"].toBool(),
                             branch_dtype);
    // The sum's gradient is x's and, in the branch's dtype, the branch's (as ATen's add returns one tensor for both).
    const at::Tensor grad_branch = r[1].defined() ? r[1] : r[0];
    return {r[0], grad_branch, r[2], r[3], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::ScalarType fused_norm_output_dtype(const torch::Tensor& x) {
  return x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA) ? at::autocast::get_autocast_dtype(at::kCUDA)
                                                                     : x.scalar_type();
}

bool fused_norm_available(const torch::Tensor& x, const torch::Tensor& branch, const FusedNormParams& p) {
  if (!x.is_cuda() || !x.is_contiguous() || x.dim() < 1 || !p.weight.defined() || p.weight.dim() != 1 ||
      p.weight.size(0) != x.size(-1) || p.weight.scalar_type() != x.scalar_type() || !p.weight.is_cuda())
    return false;
  if (p.bias && p.bias->defined() && (p.rms || p.bias->scalar_type() != x.scalar_type() || !p.bias->is_contiguous()))
    return false;
  const auto residual = kernel_float_type(x.scalar_type()), out = kernel_float_type(fused_norm_output_dtype(x));
  if (!residual || !out) return false;
  auto branch_type = out;
  if (branch.defined()) {
    if (!branch.is_cuda() || !branch.is_contiguous() || branch.sizes() != x.sizes()) return false;
    branch_type = kernel_float_type(branch.scalar_type());
    if (!branch_type) return false;
  }
  return kernels::add_norm_supported(*residual, *branch_type, *out, x.size(-1));
}

torch::Tensor fused_norm(const torch::Tensor& x, const FusedNormParams& p) {
  return FusedNorm::apply(x, p.weight, p.bias, p.eps, p.rms, static_cast<int64_t>(fused_norm_output_dtype(x)));
}

std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor& x, const torch::Tensor& branch,
                                                       const FusedNormParams& p) {
  auto r =
      FusedAddNorm::apply(x, branch, p.weight, p.bias, p.eps, p.rms, static_cast<int64_t>(fused_norm_output_dtype(x)));
  return {r[0], r[1]};
}

}  // namespace gputrain
