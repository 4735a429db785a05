#include "train/reference_model.h"

#include <algorithm>
#include <stdexcept>

#include "checkpoint/model_files.h"
#include "checkpoint/stored_weights.h"
#include "model/lora.h"
#include "objective/objectives.h"
#include "objective/preference_loss.h"
#include "parallel/context_parallel.h"
#include "parallel/parallelize.h"
#include "util/named_tensor.h"

namespace gputrain {

namespace {

// The starting weights, built and filled apart from the policy (model.init_from's, or the seed's) and
// laid out as it: under tp each rank its slices, under ZeRO-3 its rows.
Gpt frozen_copy(const Settings& s, torch::ScalarType dtype, const ProcessGroups& groups,
                const ParallelizeOptions& options) {
  Gpt copy = build_model_on_meta(s, dtype);
  std::vector<NamedTensor> base;
  for (const auto& w : module_weights(*copy))
    if (!is_lora_parameter(w.name)) base.push_back({w.name, w.tensor});
  const std::unique_ptr<StoredWeights> files =
      s.model.init_from.empty() ? nullptr : StoredWeights::init_from(s.model.init_from, s.model, base);
  parallelize_frozen(copy, groups, options, files.get());
  return copy;
}

}  // namespace

std::unique_ptr<ReferenceModel> ReferenceModel::make(const ObjectiveSpec& objective, const Settings& s, Gpt policy,
                                                     const Precision& precision, const ProcessGroups& groups,
                                                     const ParallelizeOptions& options, PipelineStages* pipeline) {
  if (!objective.reads(BatchField::kReference)) return nullptr;
  if (!reference_is_frozen_copy(s))
    return std::unique_ptr<ReferenceModel>(new ReferenceModel(policy, nullptr, precision, pipeline, groups.cp()));
  std::string what = "a frozen copy of the starting weights";
  if (s.model.quantize.enabled()) what += ", its block Linears in 4 bits as the policy's";
  if (groups.tp()) what += ", each rank its tp slices";
  if (groups.dp() && s.parallel.zero == 3) what += ", each rank its ZeRO-3 rows";
  if (groups.pp()) what += ", each rank its pipeline stage";
  auto reference = std::unique_ptr<ReferenceModel>(new ReferenceModel(
      policy, frozen_copy(s, precision.weight_dtype(), groups, options), precision, pipeline, groups.cp()));
  reference->copy_what_ = what;
  return reference;
}

std::string ReferenceModel::describe() const {
  const std::string what = copy_ || !was_.empty() ? copy_what_ : "the base, adapters off";
  if (tables_.empty()) return what;
  return "precomputed: " + (was_.empty() ? what : was_) + ", read from reference_logps/";
}

void ReferenceModel::use_tables(std::map<const PreferencePairs*, torch::Tensor> tables) {
  tables_ = std::move(tables);
  if (copy_) was_ = copy_what_;
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
    if (pipeline_) {
      fill_through_stages(model, batches);
    } else {
      for (Batch& b : batches) {
        if (b.reference_logps.defined() || b.pairs == 0) continue;
        b.reference_logps = row_logps(model, mine(b)).sums.detach().to(torch::kFloat);
      }
    }
  }
  model->train(was_training);
}

Batch ReferenceModel::mine(const Batch& b) const { return cp_ ? context_part(b, cp_->rank(), cp_->size()) : b; }

void ReferenceModel::fill_through_stages(Gpt& model, std::vector<Batch>& batches) const {
  std::vector<size_t> which;
  std::vector<Batch> need;
  for (size_t i = 0; i < batches.size(); ++i)
    if (!batches[i].reference_logps.defined() && batches[i].pairs > 0)
      which.push_back(i), need.push_back(mine(batches[i]));
  pipeline_->forward_only(model, need, precision_, [&](const torch::Tensor& stream, Batch& b) {
    b.reference_logps = stream_row_logps(model, stream, b).sums.detach().to(torch::kFloat);
  });
  // Only the last stage reads them (its loss); the others hold zeros, so every stage's batches carry them.
  for (size_t k = 0; k < which.size(); ++k) {
    Batch& b = batches[which[k]];
    b.reference_logps = need[k].reference_logps.defined()
                            ? need[k].reference_logps
                            : torch::zeros({2 * b.pairs}, torch::TensorOptions().device(b.input.device()));
  }
}

}  // namespace gputrain
