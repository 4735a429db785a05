// out[c] = sum over r of partial[r, c] for a [rows, cols] fp32 matrix: the
// last step of the fused backward kernels' weight/bias gradients, which
// leave one partial row per CUDA block (add_norm.cuh, bias_gelu.cuh). ATen's
// sum over dim 0 of such a short, wide matrix runs few blocks and took
// ~15 us per call on an H100; this one gives each 32 columns a block of
// 32 x 32 threads and adds in a fixed order (deterministic).
// Reference: the float64 weight/bias gradients of tests/gpu/add_norm_kernel_test.cpp and
// bias_gelu_kernel_test.cpp, which the fused backward kernels reach through it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace gputrain::kernels {

// Throws std::runtime_error on bad arguments or a CUDA error.
void launch_column_sum(const float* partial, int64_t rows, int64_t cols, float* out, cudaStream_t stream);

}  // namespace gputrain::kernels
