// Fused multi-tensor 8-bit AdamW (bitsandbytes' block-wise scheme): each
// block of kQuantBlock elements stores its moments as 8-bit indices into a
// dynamic quantization map (signed for exp_avg, unsigned for exp_avg_sq)
// plus one fp32 absmax per block. One CUDA block per quantization block:
// dequantize, AdamW in fp32, new absmax by block reduction, quantize to the
// nearest code. CPU reference: lib/optim/fused_cpu.cpp (adamw8bit_fused_cpu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "optim_math.cuh"

namespace gputrain::kernels {

struct FusedAdamW8bitTensor {
  void* param;          // float* or bf16 bits (uint16_t*)
  const void* grad;     // same type as param
  uint8_t* exp_avg;     // codes into the signed map
  uint8_t* exp_avg_sq;  // codes into the unsigned map
  float* absmax_avg;    // one per block of kQuantBlock elements
  float* absmax_avg_sq;
  int64_t numel;
  int64_t first_block;  // quantization blocks numbered across all tensors
  uint64_t seed;
  AdamWScalars s;
};

// signed_code / unsigned_code: the two 256-entry sorted maps in device memory.
void launch_fused_adamw8bit(const FusedAdamW8bitTensor* tensors, int n_tensors, int64_t total_blocks,
                            const float* signed_code, const float* unsigned_code, ParamType type, cudaStream_t stream);

}  // namespace gputrain::kernels
