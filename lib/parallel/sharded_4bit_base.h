// QLoRA under ZeRO-3 (FSDP-QLoRA, as answer.ai's): the frozen base's 4-bit storage sharded by whole
// blocks over the ranks that share each weight's rows. Of each Hugging Face tensor, rank r keeps blocks
// [r*c, (r+1)*c) (their codes and absmax) and every rank the small nested statistics; a unit's whole
// storage exists only while the unit is gathered (parallel/fully_sharded.h UnitStorage).
// Each rank quantizes only its blocks, from the rows they cover alone; the one statistic of the whole
// tensor, double quantization's offset (the mean of every block's absmax), comes from a sum of the
// ranks' absmax over the group. So the shards are bit for bit those of quantizing the whole tensor in
// one process (tests/unit/parallel/sharded_4bit_base_test.cpp), and no rank reads more than its rows.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/quantized_weight.h"
#include "parallel/fully_sharded.h"

namespace gputrain {

struct Sharded4bitBase {
  std::vector<UnitStorage> storage;  // each band's codes and absmax: the tensors the model reads, and this rank's rows
  int64_t bytes = 0;                 // this rank's shards and the nested statistics
};

// Double quantization of a tensor whose first-level absmax the ranks of `group` hold in parts (`mine`,
// float32, at block indices `own`; nullptr: this rank holds all): their absmax summed over the group
// (the others' entries are zeros here, so exactly the whole's), then nested into q (q.block_size and
// q.shape set) as quantize_4bit nests the whole tensor's. Collective. Also tensor parallelism's
// (parallel/tensor_parallel_4bit.h).
void nest_agreed_absmax(Quantized4bit& q, const torch::Tensor& mine, const torch::Tensor& own, Communicator* group,
                        const std::string& name);

// Every Linear of the blocks whose weight this rank holds (`holds`) gets its weight in 4 bits as
// quantize_frozen_base gives it, its codes and absmax on the meta device (FullyShardedModel gives them
// memory on `compute` while their unit is gathered), this rank's blocks of them in `storage` on
// `shards`, the nested statistics on `compute`. A band the files keep in 4 bits (`stored`) is cut as
// stored. `group_of` names the ranks sharing a weight's rows. Collective: every rank of each group
// calls it, for the same weights in the same order.
Sharded4bitBase quantize_sharded_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                                      const WeightRows& rows, const StoredBands& stored, const ShardGroupOf& group_of,
                                      torch::Device compute, torch::Device shards);

}  // namespace gputrain
