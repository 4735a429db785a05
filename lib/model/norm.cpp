#include "model/norm.h"

#include <ATen/ATen.h>

namespace gputrain {

NormImpl::NormImpl(NormKind k, int64_t n, double e) : kind(k), size(n), eps(e) {
  weight = register_parameter("weight", torch::ones({n}));
  if (kind == NormKind::kLayerNorm) bias = register_parameter("bias", torch::zeros({n}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // ATen's own ops: fused kernels on CUDA, and autocast runs them in fp32.
  // rms_norm computes in fp32 for low-precision inputs too (bf16-pure), as
  // Llama's reference RMSNorm does.
  if (kind == NormKind::kRmsNorm) return at::rms_norm(x, {size}, weight, eps);
  return at::layer_norm(x, {size}, weight, bias, eps);
}

}  // namespace gputrain
