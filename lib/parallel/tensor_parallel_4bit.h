// QLoRA under tensor parallelism: each rank's slice of a block Linear (a column-parallel layer's rows of
// each section, a row-parallel layer's columns) in 4 bits, made of exactly the whole Hugging Face
// tensor's blocks that fall in the slice. Each rank quantizes its slice's blocks alone; double
// quantization's offset, a statistic of the whole tensor, comes from a sum of the ranks' absmax over
// the tp group, as bitsandbytes would compute it on the whole. A slice's blocks are not one run of the
// whole's (a row-parallel slice takes a few from every row), so each keeps its absmax decoded in
// float32 (what dequantization computes from the nested statistics, bit for bit): 4.5 bits a weight
// where one process holds 4.127.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "model/quantized_weight.h"
#include "parallel/communicator.h"
#include "parallel/tensor_shard.h"

namespace gputrain {

// Rows [first, first + count) of the whole parameter `name` as the files keep them in 4 bits, or nullopt.
using WholeStoredBands = StoredBands;

// Every held (`holds`) block Linear's slice, split as `split_of` says over `tp`, gets its 4-bit weight
// on `device`: its values from `rows` (rows of this rank's slice), or cut from the whole band the
// files keep in 4 bits (`stored`, rows of the whole). Returns this rank's 4-bit bytes. Throws a
// config error where a slice does not cut whole blocks (parallel.tp against model.quantize.block_size).
// Collective over `tp`: every rank calls it for the same weights in the same order.
int64_t quantize_sliced_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                             const WeightRows& rows, const WholeStoredBands& stored,
                             const std::function<TensorShard(const std::string&)>& split_of, Communicator& tp,
                             torch::Device device);

}  // namespace gputrain
