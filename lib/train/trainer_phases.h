// The trainer's phases and the state they hand each other: run() calls them in order
// (train/trainer.cpp defines them; nothing else includes this).
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/background_saver.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/window_source.h"
#include "metrics/metrics_writer.h"
#include "metrics/progress.h"
#include "metrics/step_profiler.h"
#include "metrics/tensorboard_writer.h"
#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/parallelize.h"
#include "parallel/process_groups.h"
#include "planning/run_plan.h"
#include "precision/precision.h"
#include "report/model_options_report.h"
#include "report/run_summary.h"
#include "train/batch_trace.h"
#include "train/expert_balance.h"
#include "train/forward_backward.h"
#include "train/nan_guard.h"
#include "train/objective_metrics.h"
#include "train/reference_model.h"
#include "train/resume_source.h"
#include "train/run_directories.h"
#include "train/spike_guard.h"
#include "train/trainer.h"
#include "train/wall_time_guard.h"
#include "train/weight_copies.h"
#include "util/dir_lock.h"
#include "util/signals.h"
#include "util/stopwatch.h"

namespace gputrain {

// What one optimizer step leaves for the log line.
struct StepResult {
  torch::Tensor loss;  // the global batch's mean
  torch::Tensor grad_norm;
  double lr = 0;
  bool agreed_stop = false;  // a stop signal on some rank (distributed runs agree on it)
};

// The steps since the last log line.
struct LogInterval {
  SteadyClock::time_point start = SteadyClock::now();
  int64_t tokens = 0, steps = 0;
  torch::Tensor loss;  // summed on the device; read at log steps only
};

// One training run, phase by phase: run() calls them in order.
class Trainer {
 public:
  Trainer(const Recipe& recipe, const RunOptions& options)
      : recipe_(recipe), options_(options), t_start_(SteadyClock::now()) {}

  RunOutcome run() {
    set_up();
    restore();
    build_model();
    build_optimizer();
    restore_state();
    choose_batch_split();
    load_data();
    log_start();
    open_outputs();
    try {
      train();
    } catch (const std::exception& e) {
      progress_->finish();
      nlohmann::ordered_json failed = summary("failed");
      failed["error"] = e.what();
      write_summary(failed);
      throw;
    }
    progress_->finish();
    return finish();
  }

 private:
  void set_up();
  void restore();
  void build_model();
  void build_optimizer();
  void restore_state();
  void precompute_reference();
  void choose_batch_split();
  void load_data();
  void log_start() const;
  void open_outputs();
  void train();
  StepResult step();
  bool on_spike(int64_t step, double loss, double grad_norm, const SpikeVerdict& v);
  void roll_back();
  // ZeRO-3 over several ranks: what this rank keeps of a checkpoint's optimizer state as it reads it.
  std::optional<RowShare> optimizer_row_share() const;
  void log_step(const StepResult& r, int64_t step, bool eval_now);
  double evaluate();
  void save();
  std::optional<double> mfu(double tokens_per_s) const;  // metrics/flops.h: where the GPU's peak is known
  nlohmann::ordered_json summary(const std::string& status) const;
  void write_summary(const nlohmann::ordered_json& j);
  RunOutcome finish();
  // The plan changed: the recipe as resolved follows it.
  void replan() { s_ = resolved_settings(recipe_.settings, plan_); }

  const Recipe& recipe_;
  const RunOptions options_;
  const SteadyClock::time_point t_start_;
  RunPlan plan_;
  Settings s_;  // resolved_settings(recipe, plan_)

  std::unique_ptr<WindowSource> train_source_, eval_source_;
  std::vector<DirectoryLock> dir_locks_;
  ResumeSource source_;                // where the weights and state come from (train/resume_source.h)
  std::vector<NamedTensor> shapes_;    // the whole model's parameters, on meta: names and shapes
  std::optional<SavedRun> saved_run_;  // the run the resumed checkpoint belongs to
  std::filesystem::path out_dir_, ckpt_root_;

  std::unique_ptr<ProcessGroups> groups_;  // the world, its grid and this rank's groups
  ParallelizeOptions parallelize_options_;
  ParallelModel par_;  // what parallelize kept on this rank, its gradient reducer and pipeline stage
  std::optional<Precision> precision_;
  Gpt model_{nullptr};
  int64_t n_params_ = 0;   // the whole model's, before tensor parallelism keeps a shard
  std::string lora_base_;  // model.lora.save: adapters: the base's fingerprint
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
  WeightCopies copies_;
  std::optional<LrSchedule> schedule_;
  ObjectiveSpec objective_;                            // train.objective's, with the recipe's train.* settings
  std::optional<ForwardBackward> passes_;              // the step's forward and backward, and evaluation's
  std::unique_ptr<ReferenceModel> reference_;          // DPO's reference model (null: the objective has none)
  std::optional<ObjectiveMetrics> objective_metrics_;  // its metrics (preference: rewards/*) per line

  std::vector<Batch> eval_batches_;
  nlohmann::ordered_json
      eval_metrics_;  // the objective's metrics at the last evaluation ("eval_rewards/accuracies", ...)
  std::optional<WindowSampler> train_sampler_;
  std::optional<BatchLoader> train_loader_;
  int64_t first_sample_ = 0;
  std::optional<double> floor_;

  std::optional<MetricsWriter> metrics_;          // rank 0's
  std::optional<TensorBoardWriter> tensorboard_;  // rank 0's, with metrics.tensorboard
  std::optional<Progress> progress_;
  std::optional<StopSignals> signals_;
  std::optional<StepProfiler> profiler_;
  MoeMetrics moe_metrics_;
  std::optional<ExpertBalance> expert_balance_;                            // model.moe.balance: bias
  std::optional<SpikeGuard> spike_guard_;                                  // train.spike_policy
  nlohmann::ordered_json spike_events_ = nlohmann::ordered_json::array();  // this process's spikes, for the summary
  std::set<int64_t> poisoned_steps_;         // fault injection for tests (train/spike_guard.h)
  std::unique_ptr<BatchTrace> batch_trace_;  // what each step was fed, for tests (train/batch_trace.h)
  double flops_per_token_ = 0;
  std::string device_label_;  // device_name(), asked once

  RunTotals t_;
  LogInterval interval_;
  std::string status_ = "ok";
  int stop_signal_ = 0;
  SkipCounter skips_;               // steps skipped in a row (train/nan_guard.h)
  bool warned_no_targets_ = false;  // a step whose every target was masked (chat prompts), warned once
  int64_t last_saved_step_ = 0;
  std::optional<WallTimeGuard> wall_time_;  // checkpoint.max_wall_time
  std::string save_writer_;  // rank 0's writer id: a parallel run's ranks write into its save (checkpoint_dir.h)
  BackgroundSaver saver_;    // checkpoint.async; last, so an unfinished save ends before the rest goes
};

}  // namespace gputrain
