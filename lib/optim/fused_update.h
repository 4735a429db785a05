// The fused (one pass over memory) AdamW and 8-bit AdamW updates over a list
// of tensors: our CUDA kernels (kernels/fused_adamw*.cu) for CUDA tensors,
// and the same per-element math as a multi-threaded C++ loop for CPU tensors.
// The C++ loop is also the reference the kernels are tested against.
#pragma once
#include <torch/types.h>

#include <memory>
#include <vector>

#include "optim_math.cuh"

namespace gputrain {

// One tensor's update. param and grad: contiguous, same dtype (float32 or
// bfloat16, the latter written back with stochastic rounding from `seed`);
// moments float32.
struct FusedAdamWItem {
  torch::Tensor param, grad, exp_avg, exp_avg_sq;
  kernels::AdamWScalars scalars;
  uint64_t seed = 0;
  // A 0-dim float32 tensor on the item's device the gradient is multiplied by
  // as it is read (gradient clipping folded into the update), or undefined.
  torch::Tensor grad_scale;
  // For a float32 param: a contiguous bfloat16 tensor of its shape that
  // receives the updated value rounded to nearest (train/weight_copies.h), or undefined.
  torch::Tensor bf16_copy;
};

// The same for 8-bit moments: uint8 codes into the signed (exp_avg) and
// unsigned (exp_avg_sq) maps, with one float32 absmax per kQuantBlock elements.
struct FusedAdamW8bitItem {
  torch::Tensor param, grad, exp_avg, exp_avg_sq, absmax_avg, absmax_avg_sq;
  kernels::AdamWScalars scalars;
  uint64_t seed = 0;
};

class NearestCodeTable;  // quantization.h

// The two 256-entry quantization maps, float32, on the device of the tensors
// they serve; on the CPU also their lookup tables.
struct QuantMaps {
  torch::Tensor signed_code, unsigned_code;
  std::shared_ptr<const NearestCodeTable> signed_table, unsigned_table;
};
QuantMaps make_quant_maps(const torch::Device& device);

// Whether fused updates can run on `device` (CPU always; CUDA in the CUDA build).
bool fused_update_available(const torch::Device& device);

// Update every item; items may mix devices and dtypes (each combination is
// one CUDA launch or one parallel loop).
void fused_adamw(const std::vector<FusedAdamWItem>& items);
// `maps` are on the items' device.
void fused_adamw8bit(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps);

// The per-device halves (fused_update_cpu.cpp, fused_update_cuda.cpp); items
// here share one device and dtype.
void fused_adamw_cpu(const std::vector<FusedAdamWItem>& items);
void fused_adamw8bit_cpu(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps);
void fused_adamw_cuda(const std::vector<FusedAdamWItem>& items);
void fused_adamw8bit_cuda(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps);

}  // namespace gputrain
