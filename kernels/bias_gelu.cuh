// The GELU MLP's activation with the first linear layer's bias folded in:
// out = gelu_tanh(y + bias), where y is the layer's product without its bias.
// Forward is one elementwise pass (the bias that cuBLAS would add in its
// epilogue is added here instead, at no extra traffic). Backward writes
// d y = d out * gelu'(y + bias) and, in the same pass, reduces the bias
// gradient (the column sums of d y) into fp32 partial rows, one per chunk of
// rows (a fixed split, so the result is deterministic), which the caller
// sums: ATen's path reads d y a second time for that reduction.
//
// fp32 arithmetic, tanhf as ATen's kernel uses; 16-byte vectors, so the width
// must be a multiple of 16 / sizeof(element) and the rows 16-byte aligned.
// CPU/ATen reference: at::gelu(y + bias, "tanh") (tests/gpu/bias_gelu_kernel_test.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "float_type.h"

namespace gputrain::kernels {

// y/out types fp32, bf16 or fp16; the bias in fp32 or in y's type. Widths a multiple of the vector width.
bool bias_gelu_supported(FloatType y, FloatType bias, int64_t width);

struct BiasGeluArgs {
  const void* y = nullptr;     // [rows, width], contiguous, 16-byte aligned
  const void* bias = nullptr;  // [width]
  int64_t rows = 0, width = 0;
  FloatType y_type = FloatType::kFloat32, bias_type = FloatType::kFloat32;
};

// Rows of the bias-gradient partial sums the backward writes.
int64_t bias_gelu_backward_chunks(int64_t rows);

// out [rows, width] in y's type. Throw std::runtime_error on bad arguments or a CUDA error.
void launch_bias_gelu_forward(const BiasGeluArgs& a, void* out, cudaStream_t stream);
// grad_y [rows, width] in y's type from grad_out (y's type); bias_partial [bias_gelu_backward_chunks(rows), width].
void launch_bias_gelu_backward(const BiasGeluArgs& a, const void* grad_out, void* grad_y, float* bias_partial,
                               cudaStream_t stream);

}  // namespace gputrain::kernels
