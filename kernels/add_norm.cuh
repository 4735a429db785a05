// Residual add + normalization (LayerNorm or RMSNorm) in one pass, forward and
// backward, for the pre-norm blocks' `h = x + branch; y = norm(h)`.
//
// Forward reads x and the branch once, writes the sum (the residual stream,
// x's type) and the normalized output directly in the type its consumer
// wants (bf16 under autocast: no separate cast kernel), and keeps one fp32
// mean and 1/std per row. Backward reads the output's gradient, the sum and
// the gradient the residual path brings, and writes the sum's total
// gradient in x's type and, in the branch's type, for the branch: ATen's path
// is an add, a LayerNorm, a cast and, in backward, a cast, a LayerNorm
// backward, an add and a weight/bias reduction kernel. The weight and bias
// gradients are reduced per CUDA block into fp32 partial rows here (a fixed
// grid, so the result is deterministic) and summed by the caller.
//
// One warp per row, the row held in registers: widths up to kMaxAddNormWidth.
// fp32 arithmetic throughout; mean first, then the variance about it (two
// passes over registers). CPU/ATen reference: NormImpl's ATen path
// (lib/model/norm.cpp), compared by tests/gpu/add_norm_kernel_test.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "float_type.h"

namespace gputrain::kernels {

constexpr int64_t kMaxAddNormWidth = 2048;

// The (residual, branch, output) type combinations the kernels are built for:
// (fp32, fp32, fp32), (fp32, bf16|fp16, same), (fp32, fp32, bf16|fp16) and
// (bf16, bf16, bf16), (fp16, fp16, fp16); and widths 1..kMaxAddNormWidth.
bool add_norm_supported(FloatType residual, FloatType branch, FloatType out, int64_t width);

struct AddNormForwardArgs {
  const void* x = nullptr;       // [rows, width] residual stream, type `residual`
  const void* branch = nullptr;  // [rows, width] type `branch_type`, or null: normalize x itself
  void* sum = nullptr;           // [rows, width] type `residual`: x + branch (with a branch only)
  void* out = nullptr;           // [rows, width] type `out_type`
  const void* weight = nullptr;  // [width] type `residual`
  const void* bias = nullptr;    // [width] type `residual`, or null
  float* mean = nullptr;         // [rows] (LayerNorm only)
  float* rstd = nullptr;         // [rows] 1 / sqrt(variance + eps), or 1 / rms for RMSNorm
  int64_t rows = 0, width = 0;
  float eps = 1e-5f;
  bool rms = false;  // RMSNorm: no mean subtracted, no bias
  FloatType residual = FloatType::kFloat32, branch_type = FloatType::kFloat32, out_type = FloatType::kFloat32;
};

struct AddNormBackwardArgs {
  const void* grad_out = nullptr;  // [rows, width] type `out_type`
  const void* grad_sum = nullptr;  // [rows, width] type `residual`: the sum's gradient from its other uses, or null
  const void* input = nullptr;     // [rows, width] type `residual`: what was normalized (the sum, or x)
  const void* weight = nullptr;    // [width] type `residual`
  const float* mean = nullptr;     // from the forward (LayerNorm only)
  const float* rstd = nullptr;
  void* grad_input = nullptr;       // [rows, width] type `residual`: grad_sum + the normalization's backward
  void* grad_branch = nullptr;      // [rows, width] type `branch_type`: the same values, or null
  float* weight_partial = nullptr;  // [add_norm_backward_blocks(rows), width]: sum of grad_out * normalized input
  float* bias_partial = nullptr;    // same shape: sum of grad_out, or null
  int64_t rows = 0, width = 0;
  bool rms = false;
  FloatType residual = FloatType::kFloat32, branch_type = FloatType::kFloat32, out_type = FloatType::kFloat32;
};

// Rows of the weight/bias partial sums the backward writes (its grid size).
int64_t add_norm_backward_blocks(int64_t rows);

// Throw std::runtime_error on unsupported arguments or a CUDA error.
void launch_add_norm_forward(const AddNormForwardArgs& a, cudaStream_t stream);
void launch_add_norm_backward(const AddNormBackwardArgs& a, cudaStream_t stream);

}  // namespace gputrain::kernels
