// Column sums, out[c] = sum over r of m[r, c], in two stages:
//  - launch_column_partial_sums reads an fp32/bf16/fp16 [rows, cols] matrix
//    (a linear layer's output gradient, whose column sums are its bias
//    gradient) with 16-byte loads and writes one fp32 partial row per chunk
//    of rows (a fixed split);
//  - launch_column_sum adds the partial rows, which is also the last step of
//    the fused backward kernels' weight/bias gradients (add_norm.cuh,
//    bias_gelu.cuh, one partial row per CUDA block there).
// ATen's sum over dim 0 ran at a third of the memory bandwidth on an H100 for
// the [16384, 768..2304] bf16 gradients of GPT-2's linear layers, and took
// ~15 us for a [512, 768] fp32 one (few blocks). Both stages add in a fixed
// order (deterministic). Reference: ATen's sum(0) in tests/gpu/column_sum_kernel_test.cpp,
// and the float64 gradients of the fused kernels' tests, which reach it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "float_type.h"

namespace gputrain::kernels {

// Rows of the partial sums launch_column_partial_sums writes for `rows` rows.
int64_t column_partial_rows(int64_t rows);
// True where launch_column_partial_sums takes the matrix: cols a multiple of 16 / element size.
bool column_partial_sums_supported(FloatType type, int64_t cols);

// m [rows, cols] contiguous and 16-byte aligned -> partial [column_partial_rows(rows), cols] fp32.
void launch_column_partial_sums(const void* m, FloatType type, int64_t rows, int64_t cols, float* partial,
                                cudaStream_t stream);
// partial [rows, cols] fp32 -> out [cols] fp32.
void launch_column_sum(const float* partial, int64_t rows, int64_t cols, float* out, cudaStream_t stream);

}  // namespace gputrain::kernels
