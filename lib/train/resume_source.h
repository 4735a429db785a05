// Where a run's weights and training state come from, opened once (Trainer::restore): the checkpoint
// it continues from (checkpoint.resume), else model.init_from's weights, else the seed. The model is
// built on meta once; each rank fills its parts from weights() (parallelize reads them); apply()
// puts the optimizer state and loss scale into its parts; a fresh start gives step 0's counters,
// data position and generators. Spike rollback opens the run's own last checkpoint as a source the
// same way (rollback()) and takes the same path: weights() re-read by parts, then apply().
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/stored_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/settings.h"
#include "data/sampler.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/parallelize.h"
#include "precision/precision.h"

namespace gputrain {

class ResumeSource {
 public:
  ResumeSource() = default;  // a fresh start
  // checkpoint.resume's checkpoint, verified (auto passes over broken ones), without its weights
  // (weights() reads each rank's part); a fresh start when there is none. `keep`: a ZeRO-3 rank's
  // share of the optimizer state.
  static ResumeSource open(const Settings& s, const std::optional<RowShare>& keep);
  // The run's own checkpoint in `dir`, to go back to. Where the model was built on meta, each rank
  // reads its parts of the weights again in place, here (the reader stays for reread()); a model
  // built whole, or adapters saved alone, takes them whole in apply().
  static ResumeSource rollback(const std::filesystem::path& dir, const std::optional<RowShare>& keep,
                               ParallelModel& par, const std::vector<NamedTensor>& shapes, bool adapters_alone);
  // rollback's reader of the parts it read again (null: none), for the log's bytes read.
  const StoredWeights* reread() const { return reread_.get(); }

  bool continues() const { return snapshot_.has_value(); }
  const std::filesystem::path& dir() const { return dir_; }
  TrainingSnapshot& snapshot() { return *snapshot_; }  // continues() only
  const TrainingSnapshot& snapshot() const { return *snapshot_; }
  double read_s() const { return read_s_; }
  // A checkpoint of LoRA's adapters alone (model.lora.save: adapters): its frozen base is built as the
  // run built it, from model.init_from or the seed.
  bool adapters_only() const { return continues() && !snapshot_->lora_base.empty(); }
  // Whether model.init_from's files fill the model: a fresh start, or adapters alone on their base.
  bool loads_init_from(const Settings& s) const;

  // The stored weights each rank fills its parts from, for a model of the whole `shapes` (built on
  // meta): the checkpoint's, or model.init_from's base weights; null: the seed's values.
  std::unique_ptr<StoredWeights> weights(const Settings& s, const std::vector<NamedTensor>& shapes) const;
  // The counters, data position and random generators a run starts from (zero and untouched: a fresh start).
  TrainingCounters counters() const;
  int64_t first_sample(const WindowSampler& sampler) const;
  void restore_rng(const torch::Device& device) const;

  // The checkpoint's optimizer state and loss scale (and weights it holds whole: adapters alone, a
  // rollback of a model built whole) into this rank's parts, in place; its tensors are freed then.
  // `shapes`: the model's whole shapes, for resharding the state over another parallel.tp.
  // Nothing for a fresh start.
  void apply(Gpt& model, const ProcessGroups& groups, const ParallelModel& par, Optimizer& optimizer,
             Precision& precision, const std::vector<NamedTensor>& shapes);
  // The generators and the snapshot's last tensors let go (after open_outputs).
  void release() { snapshot_.reset(); }

 private:
  std::filesystem::path dir_;
  std::optional<TrainingSnapshot> snapshot_;
  double read_s_ = 0;
  std::unique_ptr<StoredWeights> reread_;
};

}  // namespace gputrain
