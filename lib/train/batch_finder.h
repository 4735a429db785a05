// train.per_device_batch_size: auto. The largest micro-batch that fits is
// searched among divisors of train.global_batch_size: first powers of two
// (1, 2, 4, ... until one does not fit), then multiples of 8 between the
// largest power that fits and the first that does not, largest first.
// grad_accum_steps = global / micro-batch, so the optimizer sees the same
// batch whatever fits. Whether a size fits is asked of a predicate: a real
// training step on CUDA (an out-of-memory error means no), the memory plan
// against run.memory_budget_mb on CPU (one rank's share of it in a parallel run).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/gpt.h"
#include "parallel/grid.h"
#include "train/forward_backward.h"

namespace gputrain {

struct BatchChoice {
  int64_t batch = 0;
  int64_t grad_accum = 0;
  std::vector<std::pair<int64_t, bool>> tried;  // (size, fitted), in order
  std::string describe() const;
  // Writes the choice into per_device_batch_size and grad_accum_steps.
  void apply_to(TrainSettings& t) const { t.per_device_batch_size = batch, t.grad_accum_steps = grad_accum; }
};

// Throws a runtime Error when not even 1 fits.
BatchChoice find_batch_size(int64_t global_batch, const std::function<bool(int64_t)>& fits);

// The CPU budget in bytes: run.memory_budget_mb, or 80% of the memory available now.
double cpu_memory_budget_bytes(const Settings& s);

// What one rank of grid `g` needs for a micro-batch of `batch` sequences: the memory plan
// (planning/memory_plan.h) of the recipe; under ZeRO-1/2 with the optimizer state of the rank owning
// the most (planning/rank_memory_plan.h); under ZeRO-3 its weights, gradients and optimizer state are
// the rank's shards plus three of the largest unit's whole tensors (the unit in use, its gradients
// before they are reduced, the next unit's gather in flight).
double rank_step_bytes(const Settings& s, const Grid& g, int64_t batch);
// Of that, what a CUDA device holds under ZeRO-3 with parallel.offload_params (the shards, their
// gradients and the optimizer state in host memory): the three units, the dequantized Linear of a 4-bit
// base, activations and logits.
double rank_device_bytes_offloaded(const Settings& s, const Grid& g, int64_t batch);

// The CPU rule: a size fits when rank_step_bytes is within `budget` bytes. `sequences`: one
// process's share of the global batch.
BatchChoice find_batch_size_cpu(const Settings& s, const Grid& g, int64_t sequences, double budget);

// The GPU rule: a size fits when one forward and backward of a micro-batch that size, the step's
// own (ForwardBackward::trial_step), runs without running out of device memory (the memory is
// released either way).
BatchChoice find_batch_size_on_device(ForwardBackward& step, Gpt& model, const ModelSettings& m, int64_t sequences,
                                      torch::Device device);

}  // namespace gputrain
