// kernels.cuda_graphs: the forward and backward of a training step's
// micro-batches, captured once as a CUDA graph and replayed every step after.
//
// Why: GPT-2 124M's forward and backward are several hundred kernels, and at
// batch 16 the host issuing them one by one leaves the GPU idle for part of
// every step (docs/benchmarks.md: 34 ms of kernels in a 37 ms step); a replay
// is one launch.
//
// What is in the graph: accumulate_gradients (every micro-batch's forward,
// loss and backward into the gradients). What is not: fp16's unscale and
// overflow check, clipping, the NaN guard and the optimizer. They run eagerly
// after each replay because the loss scaler and train.nan_policy decide on
// the host whether the update happens, and their multi-tensor kernels are a
// handful of launches.
//
// How (PyTorch's whole-network capture recipe):
// - The first kWarmupSteps steps run eagerly on the capture stream, so lazy
//   setup (cuBLAS workspaces, attention kernels' choices) happens outside it.
// - The next step frees the gradients and is captured from static copies of
//   its micro-batches, with the loss normalizer in a device scalar
//   (AccumulateOptions::inv_total); backward then allocates the gradients in
//   the graph's memory pool, where they stay: the trainer must not free them
//   between steps (keeps_gradients()).
// - Every step from then on copies its micro-batches into the static
//   buffers, refills the normalizer and replays the graph.
// Dropout's random numbers come from the default CUDA generator, which the
// graph advances on every replay as an eager step would. The fp16 loss
// scale is a device tensor the graph reads, so it follows the scaler.
// The shapes are fixed by the capture; a step with other shapes is an error.
//
// Memory: the graph's pool keeps what the captured step allocated (its peak:
// activations, logits, gradients). Between replays only the gradients and the
// loss in it are live, so evaluation runs in the same pool
// (run_in_graph_memory) instead of allocating as much again beside it; a
// graphed run then needs about the memory of an eager one.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objectives.h"
#include "precision/precision.h"

namespace gputrain {

class StepGraph {
 public:
  static constexpr int64_t kWarmupSteps = 3;

  virtual ~StepGraph() = default;
  // The gradients of accumulate_gradients(model, micro, &precision,
  // {total_targets, .objective}) and its returned mean loss (the same numbers).
  virtual torch::Tensor accumulate(Gpt& model, const std::vector<Batch>& micro, const Precision& precision,
                                   int64_t total_targets) = 0;
  // True once captured: the gradients are the graph's outputs, kept between steps.
  virtual bool keeps_gradients() const = 0;
  // Runs f with its CUDA allocations served from the graph's pool once captured (plain f()
  // before): on the capture stream, ordered after the work queued so far and before what
  // follows. Nothing f allocates may outlive it: the next replay writes over that memory.
  virtual void run_in_graph_memory(const std::function<void()>& f) = 0;
  // For summary.json: {"warmup_steps", "captured", "replayed_steps", "micro_batches"}.
  virtual nlohmann::ordered_json report() const = 0;
};

// A StepGraph on CUDA `device` over the parameters whose gradients the step
// makes, of `objective`'s loss. Throws ConfigError in a build without CUDA code paths.
std::unique_ptr<StepGraph> make_step_graph(torch::Device device, std::vector<torch::Tensor> params,
                                           const ObjectiveSpec& objective = default_objective());
// A run's step graph under kernels.cuda_graphs (`cuda_graphs`), logged: null without it or off CUDA
// (warned, unless the recipe named the CPU, which validation warns of: `named_cpu`).
std::unique_ptr<StepGraph> step_graph_for(bool cuda_graphs, bool named_cpu, torch::Device device,
                                          std::vector<torch::Tensor> params, const ObjectiveSpec& objective);

}  // namespace gputrain
