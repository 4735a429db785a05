// The "model memory anatomy" of a recipe, estimated from its settings alone:
// parameter count, FLOPs per token, and bytes for weights, gradients,
// optimizer state and activations of one micro-batch (with the chosen
// activation checkpointing, and without). `gputrain plan` prints it; the
// batch size finder uses it on CPU, where no allocator can be asked.
#pragma once
#include <cstdint>
#include <string>

#include "config/settings.h"

namespace gputrain {

struct MemoryPlan {
  int64_t parameters = 0;
  double flops_per_token = 0;                        // training (forward + backward), metrics/flops.h
  double weights = 0, gradients = 0, optimizer = 0;  // bytes
  // model.quantize: of `weights`, the largest Linear dequantized twice (in use, held for reuse).
  double dequantized = 0;
  double activations = 0;        // bytes kept for backward, one micro-batch, with the recipe's checkpointing
  double activations_plain = 0;  // the same without checkpointing
  double logits = 0;             // bytes of the loss's [B, T, vocab] tensors (at peak in backward)
  double reference = 0;          // DPO's frozen reference copy (its weights; objectives.h holds_frozen_reference)
  double total() const { return weights + gradients + optimizer + activations + logits + reference; }
};

// `batch` overrides train.per_device_batch_size (the finder asks about candidates): rows of
// model.seq_len (a preference pair is two).
MemoryPlan plan_memory(const Settings& s, int64_t batch);

// A table for `gputrain plan` (MiB, with the components' formulas).
std::string memory_plan_table(const Settings& s, const MemoryPlan& p);

}  // namespace gputrain
