// The CPU cross-entropy in row chunks, as an autograd function: forward keeps the logits (no copy)
// and one fp32 log-sum-exp per row; backward writes their gradient chunk by chunk, over the logits
// where the caller allows it (LogitsAfterLoss in model/cross_entropy.h). Each chunk's fp32 copy
// (about 4 MiB) stays in the cache across the few passes over it, where ATen's path writes an
// [N, V] fp32 copy, its log-softmax and that one's gradient to memory and casts the gradient back.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/variable.h>

#include "model/cross_entropy.h"

namespace gputrain {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 20;  // 4 MiB of fp32 values

int64_t chunk_rows(const at::Tensor& logits) { return std::max<int64_t>(1, kChunkElements / logits.size(1)); }

struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits_in,
                            const at::Tensor& targets_in, int64_t ignore_index, bool reuse_for_gradient) {
    const at::Tensor logits = logits_in.stride(-1) == 1 ? logits_in : logits_in.contiguous();
    const at::Tensor targets = targets_in.to(at::kLong).contiguous();
    const int64_t n = logits.size(0), step = chunk_rows(logits);
    at::Tensor lse = at::empty({n}, logits.options().dtype(at::kFloat));
    at::Tensor loss = at::zeros({}, lse.options());
    for (int64_t r = 0; r < n; r += step) {
      const int64_t rows = std::min(step, n - r);
      const at::Tensor x = logits.narrow(0, r, rows).to(at::kFloat), t = targets.narrow(0, r, rows);
      const at::Tensor valid = t.ne(ignore_index);
      at::Tensor row_lse = lse.narrow(0, r, rows);
      at::logsumexp_out(row_lse, x, {1});
      const at::Tensor target_logit = x.gather(1, t.masked_fill(valid.logical_not(), 0).unsqueeze(1)).squeeze(1);
      loss.add_(((row_lse - target_logit) * valid).sum());
    }
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["reuse_for_gradient"] = reuse_for_gradient;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const double scale = grads[0].item<double>();
    const bool in_place = ctx->saved_data["reuse_for_gradient"].toBool();
    at::Tensor grad = in_place ? logits : at::empty(logits.sizes(), logits.options());
    // Anything else that saved these logits now fails its version check rather than read the gradient.
    if (in_place) torch::autograd::impl::bump_version(logits);
    const int64_t n = logits.size(0), step = chunk_rows(logits);
    for (int64_t r = 0; r < n; r += step) {
      const int64_t rows = std::min(step, n - r);
      const at::Tensor t = targets.narrow(0, r, rows), valid = t.ne(ignore_index);
      // scale x (softmax - one-hot of the target), zero on rows without a target.
      at::Tensor g = logits.narrow(0, r, rows).to(at::kFloat);
      g.sub_(lse.narrow(0, r, rows).unsqueeze(1)).exp_().mul_((valid * scale).unsqueeze(1));
      g.scatter_add_(1, t.masked_fill(valid.logical_not(), 0).unsqueeze(1),
                     (valid * -scale).unsqueeze(1).to(g.dtype()));
      grad.narrow(0, r, rows).copy_(g);
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                        LogitsAfterLoss after) {
  return ChunkedCrossEntropy::apply(logits, targets, ignore_index, may_overwrite_logits(logits, after));
}

}  // namespace gputrain
