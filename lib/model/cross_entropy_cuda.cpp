// The fused CUDA cross-entropy as an autograd function: forward saves the
// logits (no copy) and one fp32 log-sum-exp per row; backward writes the
// logits' gradient in one pass, over the logits themselves where the caller
// allows it (LogitsAfterLoss in model/cross_entropy.h).
#include <torch/autograd.h>
#include <torch/csrc/autograd/variable.h>

#include "cross_entropy.cuh"
#include "model/cross_entropy.h"
#include "model/kernel_glue_cuda.h"

namespace gputrain {
namespace {

kernels::CrossEntropyArgs cross_entropy_args(const at::Tensor& logits, const at::Tensor& targets,
                                             int64_t ignore_index) {
  kernels::CrossEntropyArgs a;
  a.logits = logits.data_ptr();
  a.rows = logits.size(0);
  a.vocab = logits.size(1);
  a.row_stride = logits.stride(0);
  a.type = kernel_float_type(logits.scalar_type()).value_or(kernels::FloatType::kFloat32);
  a.targets = targets.data_ptr<int64_t>();
  a.ignore_index = ignore_index;
  return a;
}

struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits_in,
                            const at::Tensor& targets_in, int64_t ignore_index, bool reuse_for_gradient) {
    const at::Tensor logits = logits_in.stride(-1) == 1 ? logits_in : logits_in.contiguous();
    const at::Tensor targets = targets_in.to(at::kLong).contiguous();
    const auto f32 = logits.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({logits.size(0)}, f32), loss = at::empty({logits.size(0)}, f32);
    kernels::launch_cross_entropy_forward(cross_entropy_args(logits, targets, ignore_index), lse.data_ptr<float>(),
                                          loss.data_ptr<float>(), kernel_stream(logits));
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["reuse_for_gradient"] = reuse_for_gradient;
    return loss.sum();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const at::Tensor scale = grads[0].to(at::kFloat).reshape({1}).contiguous();
    const bool in_place = ctx->saved_data["reuse_for_gradient"].toBool();
    at::Tensor grad = in_place ? logits : at::empty({logits.size(0), logits.size(1)}, logits.options());
    // Anything else that saved these logits now fails its version check rather than read the gradient.
    if (in_place) torch::autograd::impl::bump_version(logits);
    kernels::launch_cross_entropy_backward(cross_entropy_args(logits, targets, ignore_index), lse.data_ptr<float>(),
                                           scale.data_ptr<float>(), grad.data_ptr(), grad.stride(0),
                                           kernel_stream(logits));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_cross_entropy_available(const torch::Tensor& logits) {
  return logits.is_cuda() && logits.dim() == 2 &&
         (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16 ||
          logits.scalar_type() == at::kHalf);
}

torch::Tensor fused_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                      LogitsAfterLoss after) {
  return FusedCrossEntropy::apply(logits, targets, ignore_index, may_overwrite_logits(logits, after));
}

}  // namespace gputrain
