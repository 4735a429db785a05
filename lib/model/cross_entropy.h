// The training loss: the sum over target tokens of -log softmax(logits)[target],
// computed in fp32 whatever the logits' dtype (a log-softmax over 50k classes
// in bf16 loses the small probabilities). On CUDA a fused kernel
// (kernels/cross_entropy.cuh) reads bf16/fp16/fp32 logits once and writes
// their gradient in their own dtype; on the CPU bf16/fp16 logits take the same
// route in row chunks of fp32 that stay in the cache. The reference both are tested against is ATen's
// log-softmax on an fp32 copy.
#pragma once
#include <torch/types.h>

namespace gputrain {

// What the loss's backward may do with the logits' memory. kReuseForGradient is
// the caller's promise that the logits are a temporary only this loss reads (the
// model's own head output): the fused kernel then writes their gradient over
// them, which saves a second [N, V] buffer at the peak of backward (1.6 GB for
// GPT-2 124M at batch 16 in bf16). The logits are marked modified (autograd's
// version counter), so anything else that saved them fails loudly in backward
// instead of reading the gradient. A leaf tensor or a view of one (a caller's
// own) is never overwritten, and the ATen path ignores the choice.
enum class LogitsAfterLoss { kKeep, kReuseForGradient };
// Whether a loss's backward may write the gradient over `logits`: asked to, and not the caller's own.
bool may_overwrite_logits(const torch::Tensor& logits, LogitsAfterLoss after);

// logits [N, V] (any float dtype), targets [N] (int64; ignore_index = no target). Returns a scalar fp32 sum.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                LogitsAfterLoss after = LogitsAfterLoss::kKeep);
// The ATen path on any device (the reference).
torch::Tensor cross_entropy_sum_reference(const torch::Tensor& logits, const torch::Tensor& targets,
                                          int64_t ignore_index);
// The CPU path for bf16/fp16 logits (model/cross_entropy_cpu.cpp): row chunks of fp32 in the cache,
// the gradient written in the logits' dtype; checked against the reference.
bool chunked_cross_entropy_applies(const torch::Tensor& logits);
torch::Tensor chunked_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                        LogitsAfterLoss after = LogitsAfterLoss::kKeep);
// The fused CUDA path (CUDA build only; false where it cannot run: CPU tensors, no kernels built).
bool fused_cross_entropy_available(const torch::Tensor& logits);
torch::Tensor fused_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index,
                                      LogitsAfterLoss after = LogitsAfterLoss::kKeep);

}  // namespace gputrain
