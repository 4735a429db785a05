#include "model/norm.h"

#include <ATen/ATen.h>

#include "model/fused_norm.h"
#include "model/meta_build.h"

namespace gputrain {

NormImpl::NormImpl(NormKind k, int64_t n, double e) : kind(k), size(n), eps(e) {
  weight = register_parameter("weight", torch::ones({n}, parameter_options()));
  if (kind == NormKind::kLayerNorm) bias = register_parameter("bias", torch::zeros({n}, parameter_options()));
}

static FusedNormParams fused_params(const NormImpl& n) {
  FusedNormParams p;
  p.weight = n.weight;
  if (n.bias.defined()) p.bias = n.bias;
  p.eps = n.eps;
  p.rms = n.kind == NormKind::kRmsNorm;
  return p;
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  const FusedNormParams p = fused_params(*this);
  if (fused_norm_available(x, {}, p)) return fused_norm(x, p);
  return reference_forward(x);
}

std::pair<torch::Tensor, torch::Tensor> NormImpl::add_forward(const torch::Tensor& x, const torch::Tensor& branch) {
  if (!branch.defined()) return {x, forward(x)};
  const FusedNormParams p = fused_params(*this);
  if (fused_norm_available(x, branch, p)) return fused_add_norm(x, branch, p);
  torch::Tensor h = x + branch;
  return {h, reference_forward(h)};
}

torch::Tensor NormImpl::reference_forward(const torch::Tensor& x) {
  // ATen's own ops: fused kernels on CUDA, and autocast runs them in fp32.
  // rms_norm computes in fp32 for low-precision inputs too (bf16-pure), as
  // Llama's reference RMSNorm does.
  if (kind == NormKind::kRmsNorm) return at::rms_norm(x, {size}, weight, eps);
  return at::layer_norm(x, {size}, weight, bias, eps);
}

#ifndef GPUTRAIN_WITH_CUDA  // else in fused_norm_cuda.cpp
at::ScalarType fused_norm_output_dtype(const torch::Tensor& x) { return x.scalar_type(); }
bool fused_norm_available(const torch::Tensor&, const torch::Tensor&, const FusedNormParams&) { return false; }
torch::Tensor fused_norm(const torch::Tensor&, const FusedNormParams&) {
  TORCH_CHECK(false, "the fused normalization needs the CUDA build");
}
std::pair<torch::Tensor, torch::Tensor> fused_add_norm(const torch::Tensor&, const torch::Tensor&,
                                                       const FusedNormParams&) {
  TORCH_CHECK(false, "the fused normalization needs the CUDA build");
}
#endif

}  // namespace gputrain
