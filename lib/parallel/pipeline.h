// Pipeline parallelism applied from outside the model (DESIGN rule 1): each
// rank of a pp group runs one stage, a contiguous run of blocks
// (parallel/grid.h: split_stages), through the model's own pieces
// (Gpt::embed, run_blocks, head_loss_sum). A step's micro-batches flow
// through the stages: the residual stream [B, T, d_model] goes forward with
// point-to-point sends, its gradient comes back the same way.
//
// Schedules (parallel.pp_schedule):
// - gpipe: every micro-batch forward, then every one backward. A stage holds
//   all micro-batches' activations at its peak.
// - 1f1b: a warm-up of (stages - stage - 1) forwards, then one forward and
//   one backward in turn, then the remaining backwards. A stage holds at most
//   stages - stage micro-batches' activations; the bubble is the same.
// Sends never wait (they finish at the end of the step) and each stage
// receives in the order its neighbour sends, so no schedule can deadlock.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objectives.h"
#include "parallel/communicator.h"
#include "parallel/grid.h"
#include "precision/precision.h"

namespace gputrain {

// Whether a stage holds the parameter `name` (GPT-2's names): the first stage
// the embeddings, the last ln_f and the head (with tied embeddings, its own
// copy of transformer.wte.weight, kept equal by sum_tied_embedding_grads),
// each its blocks.
bool stage_holds(const std::string& name, const StageLayers& stage, bool tie_embeddings);

// Frees the parameters the stage does not hold (their tensors become empty)
// and returns the names of those it keeps, in registration order.
std::vector<std::string> keep_stage(Gpt& model, const StageLayers& stage);

struct PipelineStepOptions {
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  StageLayers stage;          // this rank's
  int64_t total_targets = 0;  // the normalizer (every micro-batch's objective units, all replicas)
  const ObjectiveSpec* objective = &default_objective();  // the last stage's loss (train.objective)
  const Precision* precision = nullptr;
  // Before each micro-batch's backward, with whether it is the stage's last (data parallelism's hooks).
  std::function<void(bool last)> before_backward;
  // Bytes in use now (CPU heap, CUDA allocator); sampled after every forward for PipelineStepStats.
  std::function<int64_t()> memory_in_use;
};

struct PipelineStepStats {
  int64_t peak_micro_batches_held = 0;  // micro-batches whose activations were alive at once
  int64_t peak_memory_bytes = 0;        // memory_in_use's largest rise over the step's start
};

// Forward and backward of `micro` through this rank's stage of `pp` (group
// rank = stage). Every stage gets the same micro-batches (stage 0 reads the
// tokens, the last stage the targets). Returns the step's mean loss (sum of
// losses / total_targets, detached) on the last stage, zero on the others.
torch::Tensor pipeline_train_step(Gpt& model, Communicator& pp, const std::vector<Batch>& micro,
                                  const PipelineStepOptions& options, PipelineStepStats* stats = nullptr);

// Tied embeddings: the first stage's transformer.wte.weight gradient (the
// embedding's) and the last stage's (the head's) summed over `ends`, a group
// of the two, so both copies take the same update. `weight` is the stage's wte.
void sum_tied_embedding_grads(torch::Tensor weight, Communicator& ends);

// Forward only, in eval mode and without gradients: each of `batches` through the
// stages, and on the last stage `at_head(stream, batch)` with its last block's stream.
void pipeline_forward_only(Gpt& model, Communicator& pp, std::vector<Batch>& batches, const StageLayers& stage,
                           const Precision* precision,
                           const std::function<void(const torch::Tensor& stream, Batch& b)>& at_head);

// Forward only, in eval mode and without gradients: the sum of the objective's
// losses of `batches` on the last stage (0 on the others).
double pipeline_eval_loss_sum(Gpt& model, Communicator& pp, const std::vector<Batch>& batches, const StageLayers& stage,
                              const Precision* precision, const ObjectiveSpec& objective = default_objective());

// parallel.pp_microbatches: a config error naming the key unless `parts`
// cuts a step's `sequences` into equal micro-batches.
void check_micro_batch_split(int64_t sequences, int64_t parts);

// A step's sequences (all of `micro`, in order) cut into `parts` equal
// micro-batches (check_micro_batch_split first).
std::vector<Batch> split_micro_batches(const std::vector<Batch>& micro, int64_t parts);

}  // namespace gputrain
