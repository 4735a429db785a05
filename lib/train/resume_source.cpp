#include "train/resume_source.h"

#include <spdlog/spdlog.h>

#include "checkpoint/rank_snapshot.h"
#include "model/lora.h"
#include "parallel/fully_sharded.h"
#include "train/resume.h"
#include "train/weight_copies.h"
#include "util/device.h"
#include "util/stopwatch.h"

namespace gputrain {

ResumeSource ResumeSource::open(const Settings& s, const std::optional<RowShare>& keep) {
  ResumeSource source;
  const auto t0 = SteadyClock::now();
  std::optional<ResumePoint> point = load_resume_checkpoint(s, keep, /*with_model=*/false);
  if (!point) return source;
  source.dir_ = point->dir;
  source.snapshot_ = std::move(point->snapshot);
  source.read_s_ = seconds_since(t0);
  const TrainingSnapshot& snap = *source.snapshot_;
  if (snap.optimizer_rows_read_mb > 0)
    spdlog::info("resume: this rank keeps {:.1f} MiB ({:.0f}%) of the {:.1f} MiB of ZeRO-3 optimizer state it read",
                 snap.optimizer_rows_kept_mb, 100 * snap.optimizer_rows_kept_mb / snap.optimizer_rows_read_mb,
                 snap.optimizer_rows_read_mb);
  // Adapters saved alone are small: read whole with the snapshot (their base comes from weights()).
  if (source.adapters_only()) source.snapshot_->model = read_checkpoint_model(source.dir_);
  return source;
}

ResumeSource ResumeSource::rollback(const std::filesystem::path& dir, const std::optional<RowShare>& keep,
                                    ParallelModel& par, const std::vector<NamedTensor>& shapes, bool adapters_alone) {
  ResumeSource source;
  source.dir_ = dir;
  // (Adapters saved alone: the checkpoint holds them only, read with the snapshot; the frozen base stays.)
  std::unique_ptr<StoredWeights> files;
  if (par.parts && !adapters_alone)
    files =
        StoredWeights::checkpoint(dir, shapes, "checkpoint '" + dir.string() + "'", "delete the damaged checkpoint");
  const bool by_parts = files && rereads_parts(par, *files);
  // Verified (manifest, checksums) before any weight is put back.
  source.snapshot_ = load_training_checkpoint(dir, keep, /*with_model=*/!by_parts);
  if (by_parts) {
    reread_parts(par, *files);
    source.reread_ = std::move(files);
  }
  return source;
}

bool ResumeSource::loads_init_from(const Settings& s) const {
  return !s.model.init_from.empty() && (!continues() || adapters_only());
}

std::unique_ptr<StoredWeights> ResumeSource::weights(const Settings& s, const std::vector<NamedTensor>& shapes) const {
  if (loads_init_from(s)) {
    std::vector<NamedTensor> base;
    for (const auto& w : shapes)
      if (!is_lora_parameter(w.name)) base.push_back(w);
    return StoredWeights::init_from(s.model.init_from, s.model, base);
  }
  if (!continues() || adapters_only() || !snapshot_->model.empty()) return nullptr;  // the seed's, or held whole
  return StoredWeights::checkpoint(dir_, shapes, "checkpoint '" + dir_.string() + "'",
                                   "resume with the model settings the checkpoint was saved with");
}

TrainingCounters ResumeSource::counters() const { return continues() ? snapshot_->counters : TrainingCounters{}; }

int64_t ResumeSource::first_sample(const WindowSampler& sampler) const {
  return continues() ? sampler.resume_sample(snapshot_->sampler) : 0;  // O(1): no data is replayed
}

void ResumeSource::restore_rng(const torch::Device& device) const {
  if (!continues()) return;
  RngSnapshot rng = snapshot_->rng;
  if (!device.is_cuda()) rng.cuda = torch::Tensor();  // saved on a GPU, resumed on the CPU
  if (device.is_cuda() && rng.cuda.defined()) rng.cuda_index = device.index();
  gputrain::restore_rng(rng);
}

void ResumeSource::apply(Gpt& model, const ProcessGroups& groups, const ParallelModel& par, Optimizer& optimizer,
                         Precision& precision, const std::vector<NamedTensor>& shapes) {
  if (!continues()) return;
  TrainingSnapshot& snap = *snapshot_;
  if (!snap.model.empty())
    load_rank_weights(model, groups, par.share, snap.model, "checkpoint '" + dir_.string() + "'",
                      "resume with the model settings the checkpoint was saved with",
                      adapters_only() ? std::function<bool(const std::string&)>(is_lora_parameter) : nullptr);
  // Another parallel.tp: the optimizer state is split again by the parameters' whole shapes.
  if (snap.model.empty() && reshards_over_tp(snap, groups)) snap.model = shapes;
  optimizer.parameters_changed();  // one over host copies refreshes them
  optimizer.load_state(rank_optimizer_state(snap, groups, *par.gradients, par.share, optimizer, dir_.string()));
  if (precision.scaler() && snap.scaler) precision.scaler()->load_state(*snap.scaler);
  refresh_weight_copies(model);
  if (par.share.fully_sharded) par.share.fully_sharded->refresh_gather_copies();
  // The model and the optimizer hold what was read: a second copy would stay in host memory all run.
  snap.model = {}, snap.optimizer_state = {}, snap.optimizer_shards = {};
}

}  // namespace gputrain
