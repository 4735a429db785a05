#include "train/reference_model.h"

#include <algorithm>
#include <stdexcept>

#include "checkpoint/model_files.h"
#include "checkpoint/stored_weights.h"
#include "model/lora.h"
#include "objective/preference_loss.h"
#include "parallel/initial_parts.h"
#include "util/error.h"
#include "util/named_tensor.h"

namespace gputrain {

namespace {

void refuse(const std::string& key, const std::string& what) {
  throw usage_error(
      key + ": " + what +
      ", and DPO's reference model does not run that way yet\n    fix: use data parallelism "
      "(parallel.dp, ZeRO 1 or 2) or LoRA with DPO, or train.objective: orpo or simpo, which need no reference "
      "(docs/preference.md)");
}

// The starting weights, built and filled apart from the policy: model.init_from's, or the seed's.
Gpt frozen_copy(const Settings& s, torch::ScalarType dtype, torch::Device device) {
  Gpt copy = build_model_on_meta(s, dtype);
  std::vector<NamedTensor> held = module_weights(*copy), base;
  for (const auto& w : held)
    if (!is_lora_parameter(w.name)) base.push_back({w.name, w.tensor});
  const std::unique_ptr<StoredWeights> files =
      s.model.init_from.empty() ? nullptr : StoredWeights::init_from(s.model.init_from, s.model, base);
  InitialParts(copy, files.get()).materialize(copy, held, device);
  for (auto& p : copy->parameters()) p.requires_grad_(false);
  copy->eval();
  return copy;
}

}  // namespace

std::unique_ptr<ReferenceModel> ReferenceModel::make(const ObjectiveSpec& objective, const Settings& s, Gpt policy,
                                                     const Precision& precision, torch::Device device) {
  if (!objective.reads(BatchField::kReference)) return nullptr;
  // (pp and cp: refused for every preference objective by its recipe rules.)
  const ParallelSettings& p = s.parallel;
  const bool adapters = s.model.lora.rank > 0 && s.train.preference.reference != PreferenceReference::kModel;
  if (adapters) return std::unique_ptr<ReferenceModel>(new ReferenceModel(policy, nullptr, precision));
  if (p.tp > 1)
    refuse("parallel.tp", "is " + std::to_string(p.tp) + " and the reference is a frozen copy of the model");
  if (s.model.quantize.enabled())
    refuse("train.preference.reference", "is model on a 4-bit base (model.quantize), whose copy is not built");
  return std::unique_ptr<ReferenceModel>(
      new ReferenceModel(policy, frozen_copy(s, precision.weight_dtype(), device), precision));
}

std::string ReferenceModel::describe() const {
  const std::string what = copy_ || !was_.empty() ? "a frozen copy of the starting weights" : "the base, adapters off";
  if (tables_.empty()) return what;
  return "precomputed: " + (was_.empty() ? what : was_) + ", read from reference_logps/";
}

void ReferenceModel::use_tables(std::map<const PreferencePairs*, torch::Tensor> tables) {
  tables_ = std::move(tables);
  if (copy_) was_ = "a frozen copy of the starting weights";
  copy_ = nullptr;  // (its weights go with the last handle)
}

void ReferenceModel::fill(std::vector<Batch>& batches) const {
  for (Batch& b : batches) {
    const auto table = tables_.find(b.pair_source);
    if (b.reference_logps.defined() || table == tables_.end()) continue;
    const torch::Tensor rows = table->second.index_select(0, b.pair_keys);  // [P, 2]
    b.reference_logps = torch::cat({rows.select(1, 0), rows.select(1, 1)}).to(b.input.device());
  }
  const bool all_read = std::all_of(batches.begin(), batches.end(),
                                    [](const Batch& b) { return b.reference_logps.defined() || b.pairs == 0; });
  if (all_read) return;
  if (!was_.empty())  // the copy is gone: only its tables remain
    throw std::logic_error("reference: a batch of pairs without a precomputed table, and the frozen copy is freed");
  torch::NoGradGuard no_grad;
  AutocastGuard autocast = autocast_for(&precision_);
  Gpt model = copy_ ? copy_ : policy_;
  const bool was_training = model->is_training();
  model->eval();  // no dropout: the reference is a fixed function of the batch
  {
    std::optional<AdaptersOff> off;
    if (!copy_) off.emplace(*policy_.ptr());
    for (Batch& b : batches) {
      if (b.reference_logps.defined() || b.pairs == 0) continue;
      const torch::Tensor logits = model->forward(b.input, b.token_layout);
      b.reference_logps = summed_logps(logits, b.target.to(logits.device())).detach().to(torch::kFloat);
    }
  }
  model->train(was_training);
}

}  // namespace gputrain
