// Fused cross-entropy over a vocabulary: the loss of each row read straight
// from bf16, fp16 or fp32 logits in one pass (online max and sum of
// exponentials, fp32 arithmetic), keeping one fp32 log-sum-exp per row for
// the backward pass, which writes d loss / d logits = (softmax - onehot) x
// the incoming gradient in the logits' own dtype. Nothing of the size of the
// logits is materialized in fp32: ATen's path (upcast copy, log-softmax
// output, its gradient) moves about 6x the bytes. CPU reference: the ATen
// path in lib/model/cross_entropy.cpp, compared by tests/gpu.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "float_type.h"

namespace gputrain::kernels {

struct CrossEntropyArgs {
  const void* logits;  // [rows, vocab], rows `row_stride` elements apart, last dimension contiguous
  int64_t rows = 0, vocab = 0, row_stride = 0;
  FloatType type = FloatType::kFloat32;
  const int64_t* targets;  // [rows]; ignore_index marks rows without a target
  int64_t ignore_index = -100;
};

// lse[r] = log sum_j exp(logits[r, j]); loss[r] = lse[r] - logits[r, target[r]] (0 for ignored rows,
// NaN for a target outside [0, vocab)). Throws std::runtime_error on a CUDA error.
void launch_cross_entropy_forward(const CrossEntropyArgs& a, float* lse, float* loss, cudaStream_t stream);

// grad[r, j] = (exp(logits[r, j] - lse[r]) - [j == target[r]]) * (*grad_scale), 0 for ignored rows;
// `grad` has the logits' type, shape [rows, vocab], rows `grad_row_stride` elements apart. It may be
// the logits themselves (grad == a.logits, grad_row_stride == a.row_stride): every element is read
// before the same thread writes it, and nothing else reads it. grad_scale is one float in device memory.
void launch_cross_entropy_backward(const CrossEntropyArgs& a, const float* lse, const float* grad_scale, void* grad,
                                   int64_t grad_row_stride, cudaStream_t stream);

}  // namespace gputrain::kernels
