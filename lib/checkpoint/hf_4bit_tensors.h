// bitsandbytes 4-bit tensors in a Hugging Face folder: what transformers' save_pretrained writes for a
// model loaded in 4 bits (the QLoRA bases people publish). A quantized Linear's `X.weight` holds the
// packed codes; beside it lie `X.weight.absmax`, `.quant_map`, with double quantization
// `.nested_absmax` and `.nested_quant_map`, and `.quant_state.bitsandbytes__nf4` (or `__fp4`): JSON
// bytes naming the type, block size, dtype, shape and nested offset. Any of them may sit in another
// shard than the codes. Read part by part, as checkpoint/stored_weights.h reads plain tensors.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf_folder.h"
#include "precision/quantize_4bit.h"
#include "util/read_only_file.h"

namespace gputrain {

struct Stored4bitTensor {
  struct Located {
    int file = -1;  // index into the folder's weight files
    SafetensorsEntry entry;
  };
  std::string name;      // the weight's ("model.layers.0.self_attn.q_proj.weight")
  Quantized4bit layout;  // type, block size, shape, dtype, nesting and offset; no tensors
  Located codes, absmax, quant_map, nested_absmax, nested_quant_map, quant_state;
};

// The 4-bit tensors of `files` (`readers[i]` reads files[i]), their statistics checked; every entry of
// theirs is taken out of the headers, so that what is left reads as plain tensors. DataError naming
// the file and the tensor for a statistic missing or of the wrong size, a statistic without its
// quant_state, a quant_state that is not bitsandbytes' JSON, or a quant type or block size it lacks.
std::vector<Stored4bitTensor> take_4bit_tensors(std::vector<HfWeightFile>& files,
                                                const std::vector<std::unique_ptr<ReadOnlyFile>>& readers);

// The whole tensor, codes and statistics, as stored (on the host).
Quantized4bit read_4bit(const Stored4bitTensor& t, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers);

// Rows [first, first + count) of the tensor (seen as [its first dimension, the rest]) dequantized in
// its stored dtype: only the codes and statistics of the blocks they touch are read.
torch::Tensor read_4bit_rows(const Stored4bitTensor& t, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers,
                             int64_t first, int64_t count);

// The bytes of the tensor's codes and statistics in the files.
uint64_t stored_4bit_bytes(const Stored4bitTensor& t);

}  // namespace gputrain
