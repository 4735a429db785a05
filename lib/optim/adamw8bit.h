// 8-bit AdamW (Dettmers et al. 2022, bitsandbytes' AdamW8bit): the same
// update as AdamW, but both moments are stored block-wise quantized
// (quantization.h): 1 byte per element plus one fp32 absmax per 256, about
// 2.03 bytes of state per parameter instead of 8. Each step dequantizes a
// block, updates it in fp32 and quantizes it again, in one fused pass.
//
// Which tensors are quantized (bitsandbytes' rule): those with at least
// optim.adamw8bit.min_8bit_size elements (4096); smaller ones (biases,
// norms) keep fp32 moments, which costs little and avoids quantizing tiny
// blocks. With optim.adamw8bit.embeddings_32bit the token and position
// embeddings keep fp32 moments too (bitsandbytes' StableEmbedding advice for
// stability at the price of their memory).
//
// Under ZeRO-3 each rank quantizes its shard's blocks: shards start on a block, so they are the
// whole tensor's blocks, and the run (and its checkpoints) are those of one process.
#pragma once
#include "config/settings.h"
#include "optim/adamw.h"
#include "optim/optimizer_spec.h"
#include "optim/quantization.h"

namespace gputrain {

// Whether a parameter gets 8-bit moments.
bool adamw8bit_quantizes(const std::string& name, int64_t numel, const AdamW8bitSettings& s);

class AdamW8bit : public Optimizer {
 public:
  // `sharding` (ZeRO-3): the parameters are shards, each starting on a quantization block
  // (parallel/fully_sharded.h); which are quantized is decided by the whole tensors' sizes.
  AdamW8bit(std::vector<ParamGroup> groups, AdamWOptions opts, AdamW8bitSettings rule,
            const RowSharding* sharding = nullptr);
  void step(double lr) override;
  std::string describe() const override;

 private:
  struct Slot {
    bool quantized = false;
    torch::Tensor step, exp_avg, exp_avg_sq;  // uint8 codes when quantized, else fp32
    torch::Tensor absmax_avg, absmax_avg_sq;  // quantized only
  };
  AdamWOptions opts_;
  QuantMaps maps_;  // on the parameters' device
  std::vector<std::vector<Slot>> slots_;
  int64_t quantized_tensors_ = 0, quantized_elements_ = 0, total_elements_ = 0;
};

// optim.name: adamw8bit, for the registry (optim/optimizer_specs.cpp).
const OptimizerSpec& adamw8bit_spec();

}  // namespace gputrain
