// Block-wise 8-bit quantization with bitsandbytes' dynamic map: a value is
// stored as the index of the nearest of 256 codes after dividing by its
// block's absolute maximum. The map spends its codes on a log scale (an
// "exponent" of 0..6 decades and a linear fraction), so small values keep
// relative precision: what optimizer moments need.
#pragma once
#include <torch/types.h>

namespace gputrain {

// The 256 sorted codes of bitsandbytes' create_dynamic_map(signed): signed
// spans (-1, 1] with 0 exactly (for exp_avg); unsigned spans [0, 1] (for
// exp_avg_sq, which is never negative). float32 on the CPU.
torch::Tensor dynamic_quant_map(bool is_signed);

struct BlockQuantized {
  torch::Tensor codes;   // uint8, x's shape
  torch::Tensor absmax;  // float32, one per block of kQuantBlock elements
};

// Quantizes float32 `x` block by block (the blocks run over the flattened tensor).
BlockQuantized quantize_blockwise(const torch::Tensor& x, const torch::Tensor& map);
torch::Tensor dequantize_blockwise(const BlockQuantized& q, const torch::Tensor& map);

// The code index of 0 in a map (state starts there).
uint8_t zero_code(const torch::Tensor& map);

}  // namespace gputrain
