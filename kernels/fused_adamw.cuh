// Fused multi-tensor AdamW: one kernel launch updates every parameter of a
// list in one pass over memory (read p, g, m, v; write p, m, v), instead of
// ~10 elementwise kernels per tensor. fp32 or bf16 parameters (bf16 written
// back with stochastic rounding); fp32 moments. An fp32 parameter may also
// have a bf16 copy (bf16 mixed precision's weight copies,
// lib/train/weight_copies.h) written in the same pass. CPU reference:
// lib/optim/fused_update_cpu.cpp (adamw_loop), same per-element math
// (optim_math.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "optim_math.cuh"

namespace gputrain::kernels {

// Elements one CUDA block updates; a tensor is split into chunks of this size.
constexpr int64_t kAdamWChunk = 16384;

// One tensor of the list. The table lives in device memory; chunks are
// numbered across all tensors, first_chunk being this tensor's first.
struct FusedAdamWTensor {
  void* param;       // float* or bf16 bits (uint16_t*)
  const void* grad;  // same type as param
  float* exp_avg;
  float* exp_avg_sq;
  int64_t numel;
  int64_t first_chunk;
  uint64_t seed;  // stochastic rounding of bf16 parameters
  AdamWScalars s;
  const float* grad_scale;  // device float the gradient is multiplied by (gradient clipping), or null
  uint16_t* bf16_copy;      // fp32 parameters: a bf16 copy written with the update (round to nearest), or null
};

// Updates every tensor of `tensors` (n_tensors entries in device memory,
// sorted by first_chunk; total_chunks = the last one's first_chunk + its
// chunk count) on `stream`. Throws std::runtime_error on a CUDA error.
void launch_fused_adamw(const FusedAdamWTensor* tensors, int n_tensors, int64_t total_chunks, ParamType type,
                        cudaStream_t stream);

}  // namespace gputrain::kernels
