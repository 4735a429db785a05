// DPO's reference model (train.preference.reference): what fills each preference batch's
// Batch::reference_logps before the step, without gradients.
//  - LoRA (reference auto): the policy itself with its adapters off (model/lora.h AdaptersOff): the
//    frozen base, 0 extra bytes.
//  - A full fine-tune (or reference: model): a frozen copy of the starting weights (model.init_from,
//    or the seed's), built apart and never trained: no gradients, no optimizer state; laid out as the
//    policy (tp slices, ZeRO-3 rows, pipeline stages). On resume it is built from the start again, not
//    from the checkpoint.
//  - reference: precomputed: either of those once over every pair before training
//    (train/reference_table.h); the steps then read the table, and a frozen copy is freed.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "objective/objective_spec.h"
#include "parallel/parallelize.h"
#include "precision/precision.h"

namespace gputrain {

class ReferenceModel {
 public:
  // Null when `objective` reads no reference. A frozen copy is laid out over `groups` as the policy
  // (parallel/parallelize.h parallelize_frozen), a 4-bit base (model.quantize) quantized as its.
  // Under a pipeline (`pipeline`), the reference runs through the stages too (each rank its stage of
  // the copy, or of the policy with its adapters off), and the last stage holds the log-probabilities.
  // Under context parallelism each rank runs its chunks, and every rank gets the whole sums.
  static std::unique_ptr<ReferenceModel> make(const ObjectiveSpec& objective, const Settings& s, Gpt policy,
                                              const Precision& precision, const ProcessGroups& groups,
                                              const ParallelizeOptions& options, PipelineStages* pipeline = nullptr);
  // Each batch's reference log-probabilities, computed where not yet there (read from its pairs'
  // table where there is one).
  void fill(std::vector<Batch>& batches) const;
  // From now on the reference log-probabilities of these pairs' batches come from their tables
  // ([pairs, 2] float32: chosen, rejected); the frozen copy, if any, is freed.
  void use_tables(std::map<const PreferencePairs*, torch::Tensor> tables);
  // summary.json / the log: where the reference comes from.
  std::string describe() const;

 private:
  ReferenceModel(Gpt policy, Gpt copy, const Precision& precision, PipelineStages* pipeline, Communicator* cp)
      : policy_(std::move(policy)), copy_(std::move(copy)), precision_(precision), pipeline_(pipeline), cp_(cp) {}
  // The part of `b` this rank runs (its chunks under context parallelism; the sums come out whole).
  Batch mine(const Batch& b) const;
  // The batches without log-probabilities through the pipeline's stages.
  void fill_through_stages(Gpt& model, std::vector<Batch>& batches) const;
  Gpt policy_;
  Gpt copy_;               // null: the policy with its adapters off
  std::string copy_what_;  // the copy and its layout, for describe()
  const Precision& precision_;
  PipelineStages* pipeline_;  // null: no pipeline
  Communicator* cp_;          // null: no context parallelism (else each rank runs its chunks)
  std::map<const PreferencePairs*, torch::Tensor> tables_;
  std::string was_;  // what the tables were computed with
};

}  // namespace gputrain
