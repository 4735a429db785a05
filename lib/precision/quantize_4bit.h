// 4-bit block quantization in exactly bitsandbytes' format (QLoRA's frozen base, issue 79): the
// packed codes, the per-block absmax and, with double quantization, the absmax quantized again to
// 8 bits in blocks of 256 around their mean. Bit for bit what bitsandbytes.functional's
// quantize_4bit / dequantize_4bit give on the CPU (tests/unit/precision/quantize_4bit_test.cpp), so
// the 4-bit folders transformers saves read and write without conversion.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gputrain {

// bitsandbytes' quant_type: NormalFloat4 (quantiles of N(0, 1)) or the 1-2-1 float FP4.
enum class Quant4Type { kNf4, kFp4 };
std::string quant4_type_name(Quant4Type t);  // "nf4" | "fp4", as bitsandbytes spells it

// The block sizes bitsandbytes quantizes with (quantize_4bit's check).
bool is_quant4_block_size(int64_t block_size);

// The 16 values a 4-bit code stands for, float32 [16], in code order (FP4's are not sorted).
torch::Tensor quant4_code(Quant4Type t);
// bitsandbytes' signed dynamic 8-bit map (create_dynamic_map), float32 [256] sorted: double
// quantization's nested_quant_map.
torch::Tensor dynamic_map_8bit();

// Blockwise 8-bit quantization of `values` (float32, any length) with `code` (sorted float32 [256]):
// each block's absmax, each value times its reciprocal mapped to the nearest code through
// bitsandbytes' 65536-bin lookup table (so bit for bit its CPU kernel, not an exact search).
struct Quantized8bit {
  torch::Tensor codes;   // uint8 [n]
  torch::Tensor absmax;  // float32 [ceil(n / block_size)]
};
Quantized8bit quantize_blockwise_8bit(const torch::Tensor& values, const torch::Tensor& code, int64_t block_size);
torch::Tensor dequantize_blockwise_8bit(const Quantized8bit& q, const torch::Tensor& code, int64_t block_size);

// One tensor in 4 bits. Without double quantization `absmax` is float32 [blocks]; with it, uint8
// [blocks] codes of (absmax - offset) under `nested_code`, scaled per 256 blocks by `nested_absmax`.
struct Quantized4bit {
  Quant4Type type = Quant4Type::kNf4;
  int64_t block_size = 64;
  std::vector<int64_t> shape;                  // the original tensor's
  torch::ScalarType dtype = torch::kBFloat16;  // the original tensor's (bitsandbytes' quant_state dtype)
  torch::Tensor codes;                         // uint8 [ceil(numel / 2), 1], two codes a byte, high nibble first
  torch::Tensor absmax;
  bool nested = false;
  float offset = 0.0f;  // the mean of the first-level absmax
  int64_t nested_block_size = 256;
  torch::Tensor nested_absmax;  // float32 [ceil(blocks / 256)]
  torch::Tensor nested_code;    // float32 [256]

  int64_t numel() const;
  int64_t blocks() const { return (numel() + block_size - 1) / block_size; }
  // Bytes of storage (codes and statistics): what a rank holds for this tensor.
  int64_t storage_bytes() const;
};

// The bytes quantize_4bit's result holds for `numel` weights (Quantized4bit::storage_bytes, before any
// tensor exists: the memory plan's count).
int64_t quant4_storage_bytes(int64_t numel, int64_t block_size, bool double_quant);

// `w` (float32, bfloat16 or float16, any shape) quantized as quantize_4bit(w, blocksize,
// compress_statistics=double_quant, quant_type) does. Throws std::invalid_argument on a block size
// bitsandbytes does not have or another dtype.
Quantized4bit quantize_4bit(const torch::Tensor& w, Quant4Type type, int64_t block_size, bool double_quant);
// Double quantization of `absmax`, the first-level float32 absmax of all q's blocks, into q (the
// second half of quantize_4bit; a sharded quantizer calls it with every rank's blocks gathered,
// since the offset is their mean).
void nest_absmax(Quantized4bit& q, const torch::Tensor& absmax);
// The first-level absmax, float32 [blocks] (with double quantization: decoded and the offset added).
torch::Tensor block_absmax(const Quantized4bit& q);
// The tensor back in `dtype` (as dequantize_4bit: each code's value times its block's absmax in float32,
// then rounded once to dtype), shaped as it was.
torch::Tensor dequantize_4bit(const Quantized4bit& q, torch::ScalarType dtype);
// The same into `out` (q.numel() elements of its dtype): on the CPU one multi-threaded pass over the
// codes with no temporaries (the product's path, once per call).
void dequantize_4bit_into(const Quantized4bit& q, torch::Tensor& out);
// Its CUDA path (kernels/dequant_4bit.cuh), for device tensors; in CUDA builds only.
void dequantize_4bit_cuda(const Quantized4bit& q, torch::Tensor& out);

}  // namespace gputrain
