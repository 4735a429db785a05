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

// kernels::quantize_nearest for CPU loops without its binary search: the
// float's sign and top 14 magnitude bits (exponent and 6 mantissa bits)
// pick a bucket whose few candidate codes were found in advance, so a value
// costs one table load and a short scan instead of ~8 unpredictable branches.
// Gives exactly quantize_nearest's answer (tested on edge values).
class NearestCodeTable {
 public:
  explicit NearestCodeTable(const torch::Tensor& map);
  uint8_t operator()(float x) const;

 private:
  static constexpr int kKeys = 1 << 14;  // |x| < 2 (keys above: clamped, codes end at 1)
  static int key_of(float x);
  float code_[256];
  uint8_t first_[2][kKeys];  // [negative][key]: lowest candidate
  uint8_t count_[2][kKeys];  // candidates in the bucket (1 + a few)
};

// The code index of 0 in a map (state starts there).
uint8_t zero_code(const torch::Tensor& map);

}  // namespace gputrain
