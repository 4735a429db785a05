// 4-bit dequantization (QLoRA's base, precision/quantize_4bit.h) on CUDA: bitsandbytes' packed NF4/FP4
// codes (two a byte, high nibble first) times each block's absmax, the absmax itself decoded from
// double quantization's 8-bit codes where there are, computed in fp32 and rounded once to the output
// type. One thread per byte. Reference: precision/quantize_4bit.cpp's CPU path, bit for bit
// (tests/gpu/dequant_4bit_kernel_test.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "float_type.h"

namespace gputrain::kernels {

struct Dequant4bitArgs {
  const uint8_t* codes = nullptr;         // [ceil(n / 2)]
  const float* absmax = nullptr;          // [blocks] without double quantization
  const uint8_t* absmax_codes = nullptr;  // [blocks] with it
  const float* nested_code = nullptr;     // [256]
  const float* nested_absmax = nullptr;   // [ceil(blocks / nested_block)]
  float offset = 0.0f;
  int64_t n = 0, block = 64, nested_block = 256;
  float code[16] = {};  // the values of the 16 codes
};

// out [n] of `type` on the device, on `stream`.
void launch_dequantize_4bit(const Dequant4bitArgs& a, void* out, FloatType type, cudaStream_t stream);

}  // namespace gputrain::kernels
