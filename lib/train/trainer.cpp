#include "train/trainer.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <csignal>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_files.h"
#include "checkpoint/rank_snapshot.h"
#include "checkpoint/stored_weights.h"
#include "config/schema.h"
#include "config/validate.h"
#include "data/mixture.h"
#include "data/rng.h"
#include "metrics/flops.h"
#include "metrics/parallel_reports.h"
#include "model/gpt_shapes.h"
#include "optim/make_optimizer.h"
#include "objective/objectives.h"
#include "optim/param_groups.h"
#include "parallel/fully_sharded.h"
#include "parallel/grid.h"
#include "parallel/matrix_sharding.h"
#include "parallel/pipeline.h"
#include "parallel/replica_sums.h"
#include "parallel/text_broadcast.h"
#include "parallel/world.h"
#include "train/batch_finder.h"
#include "train/full_evaluation.h"
#include "train/objective_metrics.h"
#include "train/lora_base_fingerprint.h"
#include "train/resume.h"
#include "train/run_snapshot.h"
#include "report/start_log.h"
#include "train/reference_table.h"
#include "train/step_graph.h"
#include "train/trainer_phases.h"
#include "report/weights_read_report.h"
#include "util/atomic_file.h"
#include "util/host_allocator.h"
#include "util/device.h"
#include "util/error.h"
#include "util/failpoint.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = SteadyClock;

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Batch size auto keeps the split a resumed checkpoint chose (free memory may differ now), when
// it was chosen for this global batch in a world of the same dp.
std::optional<BatchSplit> saved_split(const TrainingSnapshot& snap, const RunPlan& plan) {
  int64_t snap_dp = 1;  // the world the checkpoint was saved in
  if (auto p = snap.settings.find("parallel"); p != snap.settings.end())
    if (auto d = p->find("dp"); d != p->end() && d->is_number_integer()) snap_dp = d->get<int64_t>();
  if (plan.batch.chosen() || snap_dp != plan.dp ||
      plan.batch.global_batch_size != snap.per_device_batch_size * snap.grad_accum_steps * snap_dp)
    return std::nullopt;
  return BatchSplit{snap.per_device_batch_size, snap.grad_accum_steps, 0};
}

}  // namespace

// The world, the device and the data; rank 0 locks the run's folders.
void Trainer::set_up() {
  plan_ = plan_run(recipe_.settings, detect_world_from_environment(), options_.overwrite);
  replan();
  if (!plan_.lead) spdlog::set_level(spdlog::level::warn);  // only rank 0 logs progress
  at::set_num_threads(static_cast<int>(plan_.threads));
  install_host_block_cache(s_.run.cpu_malloc_cache);  // before the large allocations start
  // Data first: a bad data file stops the run before anything is written.
  train_source_ = make_window_source(s_.data.train, s_.model, "data.train");
  if (s_.data.eval.format != DataFormat::kNone) eval_source_ = make_window_source(s_.data.eval, s_.model, "data.eval");
  // Before this run reads a checkpoint or removes one: a second run into a live one's folder stops here.
  if (plan_.lead) dir_locks_ = lock_run_directories(s_);
}

// The checkpoint to continue from, checked against this recipe before anything is written.
void Trainer::restore() {
  if (plan_.lead && options_.overwrite && recipe_.settings.checkpoint.resume == "auto") remove_old_checkpoints(s_);
  // Its weights are read in build_model: each rank its own part (checkpoint/stored_weights.h).
  source_ = ResumeSource::open(s_, optimizer_row_share());
  if (source_.continues()) {
    const TrainingSnapshot& snap = source_.snapshot();
    if (auto split = saved_split(snap, plan_)) plan_.batch = *split;
    replan();
    const ResumeChanges changes = compare_for_resume(snap.settings, settings_to_json(s_), source_.dir());
    for (const auto& c : changes.reported) spdlog::info("resume: {} changed from {} to {}", c.key, c.saved, c.now);
    for (const auto& c : changes.diverging)
      spdlog::warn("resume: {} changed from {} to {}; the run continues, but not as the saved one would have", c.key,
                   c.saved, c.now);
    saved_run_ = saved_run(source_.dir(), snap.settings["run"]["output_dir"].get<std::string>(), s_);
    if (!saved_run_->continued)
      spdlog::info("resume: the checkpoint belongs to the run in '{}'; this run writes its own metrics in '{}'",
                   saved_run_->output_dir.string(), s_.resolved_output_dir());
  }
  bool overwrite = options_.overwrite;
  if (plan_.lead && !saved_run_ && replaces_failed_torchrun_attempt(s_.resolved_output_dir(), plan_.world)) {
    overwrite = true;
    spdlog::warn(
        "torchrun attempt {}: no checkpoint to continue from, so training starts again and replaces what "
        "the failed attempt wrote in {}",
        plan_.world.attempt, s_.resolved_output_dir());
  }
  out_dir_ = plan_.lead ? prepare_output_dir(s_, overwrite, saved_run_ ? &*saved_run_ : nullptr)
                        : fs::path(s_.resolved_output_dir());
  if (plan_.lead && plan_.world.agent_store) mark_torchrun_attempt(out_dir_, plan_.world);
  ckpt_root_ = s_.resolved_checkpoint_dir();
}

// The process groups (their rendezvous comes after rank 0's own checks: if those fail, the other
// ranks' wait ends with an error naming rank 0), then the model: built, restored, parallelized.
void Trainer::build_model() {
  if (plan_.world.launched() && !plan_.group_world.launched())
    spdlog::info("kernels.cuda_graphs: a world of one ({}) trains as a single process, without a process group",
                 plan_.world.describe());
  groups_ = std::make_unique<ProcessGroups>(plan_.group_world, s_.parallel, plan_.device);
  parallelize_options_ = ParallelizeOptions{s_.parallel, s_.train.gradient_checkpointing, s_.train.checkpoint_every,
                                            plan_.device, zero3_shard_blocks(s_.optim)};
  if (groups_->distributed())
    save_writer_ = broadcast_text(*groups_->world_comm(), this_writer_id(), 0, "rank 0's checkpoint writer id");
  t_.mem_start_mb = current_rss_mb();
  precision_.emplace(s_.precision, plan_.device);
  // Built on meta once; each rank fills its part from the source (a checkpoint, model.init_from, the seed).
  model_ = build_model_on_meta(s_, precision_->weight_dtype());
  model_->train();
  for (const auto& w : module_weights(*model_))
    shapes_.push_back({w.name, torch::empty(w.tensor.sizes(), w.tensor.options().device(torch::kMeta))});
  const bool loads_init_from = source_.loads_init_from(s_);
  const std::unique_ptr<StoredWeights> files = source_.weights(s_, shapes_);
  if (files && loads_init_from) spdlog::info("model: {}", files->description());
  // The frozen base's fingerprint, taken by parts from where its values come from: checkpoints of
  // adapters alone record it, and resume only on the base that has it.
  const bool saves_adapters = s_.model.lora.rank > 0 && s_.model.lora.save == LoraSave::kAdapters;
  if (saves_adapters || source_.adapters_only()) {
    const std::string base =
        lora_base_fingerprint_by_parts(model_, InitialParts(model_, files.get()), groups_->world_comm());
    if (source_.adapters_only())
      check_lora_base(base, source_.snapshot().lora_base, source_.dir().string(), s_.model.init_from);
    if (saves_adapters) lora_base_ = base;
  }
  n_params_ = model_->parameter_count();
  // TP -> CP -> PP -> EP -> activation checkpointing -> DP/ZeRO (parallel/parallelize.h).
  par_ = parallelize(model_, *groups_, parallelize_options_, files.get());
  if (par_.share.initialized_bytes > 0)
    spdlog::info(
        "model: built on the meta device; this rank gave storage and {} only to its part, {:.1f} MiB of the {:.1f} "
        "MiB of weights",
        files ? "values" : "initial values", mib(static_cast<double>(par_.share.initialized_bytes)),
        mib(static_cast<double>(n_params_ * c10::elementSize(precision_->weight_dtype()))));
  if (par_.share.quantized_bytes > 0)
    spdlog::info("model: the frozen base's block Linears in 4 bits (model.quantize): {:.1f} MiB on this rank",
                 mib(static_cast<double>(par_.share.quantized_bytes)));
  if (files)
    spdlog::info(weights_read_line(
        *groups_, files->bytes_read(), files->bytes_stored(),
        loads_init_from ? s_.model.init_from + " (model.init_from)" : "checkpoint " + source_.dir().string()));
}

// The optimizer over the parameters this rank updates, the schedule, the step graph.
void Trainer::build_optimizer() {
  for (const auto& p : par_.share.weights) params_.push_back(p.tensor);
  std::vector<ParamGroup> groups = par_.gradients->owned_groups(make_param_groups(*model_, s_.optim, s_.model));
  // Its state in memory, on the host or in a file, as parallel.offload_* ask (optim/optimizer_placement.h).
  const OptimizerPlacement where =
      rank_optimizer_placement(par_, parallelize_options_, groups, out_dir_.string(), s_.run.device == "cpu");
  for (const auto& notice : where.notices) spdlog::warn("{}", notice);
  FullyShardedModel* sharded = par_.share.fully_sharded.get();
  const std::optional<RowSharding> rows = sharded ? std::optional(sharded->row_sharding()) : std::nullopt;
  optimizer_ = make_optimizer(std::move(groups), s_.optim, rows, matrix_sharding(par_.share, *groups_), where);
  // ZeRO-3's optimizer holds shards, not the weights the model multiplies by.
  if (!sharded) copies_ = attach_weight_copies(model_, *optimizer_, *precision_, par_.share.runs_head());
  if (copies_.tensors > 0)
    spdlog::info("bf16 weight copies: {} weights ({:.1f} MiB) kept by the optimizer, so autocast casts none of them",
                 copies_.tensors, mib(static_cast<double>(copies_.bytes)));
  schedule_.emplace(s_.optim, s_.train.max_steps);
  objective_ = configured_objective(s_.train);
  objective_metrics_.emplace(objective_);
  std::unique_ptr<StepGraph> graph =
      step_graph_for(s_.kernels.cuda_graphs, s_.run.device == "cpu", plan_.device, params_, objective_);
  passes_.emplace(*groups_, par_.gradients.get(), par_.pipeline.get(), model_, *precision_, objective_,
                  std::move(graph));
  if (s_.model.moe.enabled() && s_.model.moe.balance == MoeBalance::kBias)
    expert_balance_.emplace(model_, plan_.device);
  reference_ =
      ReferenceModel::make(objective_, s_, model_, *precision_, *groups_, parallelize_options_, par_.pipeline.get());
  if (reference_ && s_.train.preference.reference == PreferenceReference::kPrecomputed) precompute_reference();
  if (reference_) passes_->set_batch_preparation([this](std::vector<Batch>& b) { reference_->fill(b); });
  if (reference_)
    spdlog::info("train.objective {}: the reference model is {}", objective_name(s_.train.objective),
                 reference_->describe());
}

// train.preference.reference: precomputed: every pair's reference log-probabilities once, before the
// steps (train/reference_table.h), for the training and the evaluation pairs.
void Trainer::precompute_reference() {
  std::map<const PreferencePairs*, torch::Tensor> tables;
  ReferenceTableOptions o{out_dir_ / "reference_logps",   "train",      s_.model.seq_len,
                          s_.train.per_device_batch_size, plan_.device, plan_.lead};
  tables[train_source_->preference()] = reference_table(*train_source_->preference(), *reference_, *groups_, o);
  if (eval_source_ && eval_source_->preference()) {
    o.name = "eval";
    tables[eval_source_->preference()] = reference_table(*eval_source_->preference(), *reference_, *groups_, o);
  }
  reference_->use_tables(std::move(tables));
}

// A resumed run's optimizer state and loss scale into this rank's parts (checkpoint/rank_snapshot.h).
void Trainer::restore_state() {
  source_.apply(model_, *groups_, par_, *optimizer_, *precision_, shapes_);
  if (expert_balance_ && source_.continues())
    expert_balance_->restore(source_.snapshot().expert_bias, model_, source_.dir().string());
}

// train.per_device_batch_size: auto: the largest micro-batch of this rank's share of the global
// batch that fits (train/batch_finder.h). The resolved recipe is written once the split is known.
void Trainer::choose_batch_split() {
  if (!plan_.batch.chosen()) {
    validate_batch_auto(s_, run_world(plan_));
    const int64_t share = plan_.batch.global_batch_size / plan_.dp;  // split over the ranks first
    const double budget = cpu_memory_budget_bytes(s_);
    const bool cpu = plan_.device.is_cpu();
    const BatchChoice choice = cpu ? find_batch_size_cpu(s_, groups_->grid(), share, budget)
                                   : find_batch_size_on_device(*passes_, model_, s_.model, share, plan_.device);
    forget_expert_loads(model_);  // the trials' forwards are no step's
    plan_.batch.per_device_batch_size = choice.batch;
    plan_.batch.grad_accum_steps = choice.grad_accum;
    replan();
    spdlog::info("{}{}", choice.describe(),
                 cpu ? fmt::format(" (CPU: memory plan against {:.0f} MiB)", mib(budget))
                     : std::string(" (trial steps on the GPU)"));
  }
  if (par_.pipeline && s_.parallel.pp_microbatches > 0)  // validate could not check it with batch size auto
    check_micro_batch_split(plan_.sequences_per_rank(), s_.parallel.pp_microbatches);
  if (plan_.lead) write_file_atomic((out_dir_ / "recipe.resolved.yaml").string(), recipe_to_yaml(s_));
}

// The eval batches, the training stream (each replica reads its share of every global batch; its
// tp ranks the same), and a resumed run's counters and place in the data.
void Trainer::load_data() {
  const auto seed = static_cast<uint64_t>(s_.run.seed);
  if (eval_source_ && !s_.train.eval_full) {
    WindowSampler eval_sampler(*eval_source_, SamplerOptions{seed, kEvalStream});
    BatchLoader eval_loader(*eval_source_, eval_sampler, loader_options(s_, s_.data.eval, plan_.device, 0));
    for (int64_t i = 0; i < s_.train.eval_steps; ++i) eval_batches_.push_back(eval_loader.next());
  }
  train_sampler_.emplace(*train_source_, SamplerOptions{seed, kTrainStream});
  LoaderOptions options = loader_options(s_, s_.data.train, plan_.device, s_.data.num_workers);
  options.shard = groups_->coord().dp;
  options.shards = plan_.dp;
  first_sample_ = source_.first_sample(*train_sampler_);
  static_cast<TrainingCounters&>(t_) = source_.counters();
  if (source_.continues()) t_.resumed_from = t_.step;
  last_saved_step_ = t_.step;  // a resumed run's step is on disk already
  train_loader_.emplace(*train_source_, *train_sampler_, options, first_sample_);
  floor_ = train_source_->entropy_floor(s_.model.seq_len);
}

void Trainer::log_start() const {
  StartFacts f{recipe_.source,
               device_name(plan_.device),
               plan_.threads,
               n_params_,
               model_->parameter_count(),
               precision_->describe(),
               optimizer_->describe(),
               optimizer_->state_bytes(),
               optimizer_->placement(),
               par_.share.recomputed_blocks,
               train_source_->describe(),
               train_sampler_->samples_per_epoch(),
               plan_.sequences_per_rank(),
               floor_,
               plan_.dp,
               out_dir_.string(),
               groups_->distributed() ? describe_parallelism(*groups_, parallelize_options_, par_) : ""};
  if (source_.continues())
    f.resumed = StartFacts::Resumed{source_.dir().string(), t_.step, t_.tokens, first_sample_, source_.read_s()};
  for (const std::string& line : start_log_lines(s_, f)) spdlog::info("{}", line);
  for (const auto& w : recipe_.warnings) spdlog::warn("{}", w.str());
}

// metrics.jsonl, the progress line, the stop signals and the profiler; then a resumed run's
// random generators, last: building the model and the batches drew from them.
void Trainer::open_outputs() {
  const std::string metrics_path = (out_dir_ / "metrics.jsonl").string();
  const bool continuing = saved_run_ && saved_run_->continued;  // appending to the checkpoint run's own metrics
  if (plan_.lead && continuing) metrics_.emplace(metrics_path, t_.metrics_bytes);
  if (plan_.lead && !continuing) metrics_.emplace(metrics_path);
  if (plan_.lead && s_.metrics.tensorboard) {
    tensorboard_.emplace(out_dir_ / "tensorboard", continuing ? std::optional<int64_t>(t_.step) : std::nullopt);
    tensorboard_->text("recipe", recipe_to_yaml(s_), t_.step);
  }
  progress_.emplace(plan_.lead ? s_.metrics.progress : ProgressStyle::kOff, s_.train.max_steps);
  signals_.emplace(s_.checkpoint.preempt_signals);
  // Each process profiles itself: profile/ alone, profile/rank<N>/ with several.
  const World& world = plan_.world;
  profiler_.emplace(s_.metrics.profile_at, s_.metrics.profile_steps, plan_.device,
                    world.size > 1 ? out_dir_ / "profile" / fmt::format("rank{}", world.rank) : out_dir_ / "profile");
  reset_peak_memory(plan_.device);
  source_.restore_rng(plan_.device);
  source_.release();  // the saved tensors are copied in; free them
  if (s_.train.spike_policy != SpikePolicy::kOff) spike_guard_.emplace(s_.train.spike_window, s_.train.spike_threshold);
  poisoned_steps_ = poisoned_steps_from_environment();
  batch_trace_ = BatchTrace::from_environment(plan_.world.rank);
  flops_per_token_ = training_flops_per_token(s_.model);
  device_label_ = device_name(plan_.device);
  // The first checkpoint's save time is guessed from its size.
  wall_time_.emplace(s_.checkpoint.max_wall_time, t_start_,
                     static_cast<double>(optimizer_->state_bytes()) / 1e6 + n_params_ * 4 / 1e6);
}

std::optional<double> Trainer::mfu(double tokens_per_s) const {
  return model_flops_utilization(tokens_per_s, flops_per_token_, plan_.world.size, device_label_);
}

void Trainer::train() {
  if (t_.step >= s_.train.max_steps)
    spdlog::info("resume: the checkpoint is at step {}, train.max_steps is {}: nothing to train", t_.step,
                 s_.train.max_steps);
  interval_ = LogInterval{};
  release_host_block_cache();  // what building and reading left cached, steps would not reuse
  failpoint("train.start");    // the model and data are ready: tests read the resident memory training starts from
  while (t_.step < s_.train.max_steps) {
    if (wall_time_->near(*groups_, plan_.lead)) {
      t_.stop_reason = "max_wall_time";
      status_ = "preempted";
      progress_->finish();
      spdlog::warn("{}", wall_time_->stop_line(t_.step));
      break;
    }
    profiler_->before_step(t_.step + 1);
    const auto t0 = Clock::now();
    const StepResult r = step();
    const int64_t step = t_.step;
    t_.train_seconds += seconds_since(t0);
    profiler_->after_step(step);

    const bool eval_now = (s_.train.eval_full ? eval_source_ != nullptr : !eval_batches_.empty()) &&
                          ((s_.train.eval_every > 0 && step % s_.train.eval_every == 0) || step == s_.train.max_steps);
    // One process looks at its signals as late as it can; ranks use the flag they agreed on.
    const bool stop_now = groups_->distributed() ? r.agreed_stop : StopSignals::requested() != 0;
    if (step % s_.train.log_every == 0 || eval_now || step == s_.train.max_steps || stop_now)
      log_step(r, step, eval_now);
    if (stop_now) {
      stop_signal_ = StopSignals::requested() != 0 ? StopSignals::requested() : SIGTERM;  // SIGTERM: a peer's
      status_ = StopSignals::requested() == 0 || StopSignals::preempted() ? "preempted" : "interrupted";
      t_.stop_reason = signal_name(stop_signal_);
      failpoint("train.stopping");  // tests deliver a second signal here, before the save
      break;
    }
    wall_time_->step_took(seconds_since(t0));
    if (s_.checkpoint.every > 0 && step % s_.checkpoint.every == 0) save();
    failpoint("train.step_done");
  }
  // A stopped run always saves (that is the point of stopping gracefully); a finished one if asked.
  if (status_ != "ok" || s_.checkpoint.at_end) save();
  saver_.wait();            // checkpoint.async: the last save is on disk before the run reports
  failpoint("train.done");  // tests read the process's peak resident memory here, from /proc
}

// One optimizer step: forward and backward of the micro-batches, the gradients summed over the
// replicas, checked (fp16 overflow, non-finite values), clipped, and applied.
StepResult Trainer::step() {
  // Distributed runs draw each step's random numbers (dropout) from a seed made of (run.seed, dp rank,
  // step): replicas differ, the tp ranks of one replica agree (their activations outside the split
  // layers are the same tensors), and a resumed run needs no other rank's generator state.
  if (groups_->distributed())
    torch::manual_seed(mix_seed(static_cast<uint64_t>(s_.run.seed), static_cast<uint64_t>(groups_->coord().dp),
                                static_cast<uint64_t>(t_.step)));
  std::vector<Batch> micro;
  for (int64_t i = 0; i < s_.train.grad_accum_steps; ++i) micro.push_back(train_loader_->next());
  // What the objective needs beside the data (DPO's reference log-probabilities), from the batches as
  // read: a poisoned batch (the spike guard's tests) is then one the reference did not see.
  passes_->prepare(micro);
  for (int64_t i = 0; i < s_.train.grad_accum_steps; ++i) {
    Batch& b = micro[static_cast<size_t>(i)];
    if (poisoned_steps_.count(t_.step + 1)) poison_batch(b, s_.model.vocab_size, t_.step + 1);
    if (batch_trace_) batch_trace_->record(t_.step + 1, i, b);
  }
  // One all-reduce: the objective's units normalize the loss, the target tokens are the throughput.
  const ForwardBackward::Counts local = passes_->counts(micro);
  const std::vector<int64_t> counts = global_counts(*groups_, {local.units, local.targets, local.second});
  const int64_t step_units = counts[0], step_tokens = counts[1];
  for (Batch& b : micro)
    if (counts[2] > 0) b.second_unit_weight = static_cast<double>(step_units) / static_cast<double>(counts[2]);
  objective_metrics_->prepare(micro, plan_.device);
  if (step_tokens == 0 && !warned_no_targets_) {  // chat data: windows of prompt text only
    warned_no_targets_ = true;
    progress_->finish();
    spdlog::warn(
        "step {}: no target takes loss (every target of the batch is masked, e.g. chat prompts); it adds "
        "nothing to the gradients. Many such steps: raise model.seq_len so windows reach the replies",
        t_.step + 1);
  }
  StepResult r;
  r.loss = passes_->step(micro, step_units);
  if (passes_->captured_at_last_step()) {
    progress_->finish();
    spdlog::info("kernels.cuda_graphs: step {} captured ({} micro-batches); replayed from here on", t_.step + 1,
                 micro.size());
  }
  par_.gradients->finish();  // every rank now holds the summed gradients (ZeRO-2: of its own parameters)
  // The global batch's mean loss; and a stop signal on any rank stops every rank after this step
  // (a signal may reach them a step apart; one arriving later in this step counts at the next).
  std::tie(r.loss, r.agreed_stop) = sum_loss_and_any(*groups_, r.loss, StopSignals::requested() != 0,
                                                     /*per_chunk=*/!objective_.whole_sequence_loss);
  bool overflow = precision_->unscale_and_check(params_);  // fp16: inf/nan gradients
  if (precision_->has_scaler()) overflow = par_.gradients->overflow_on_any_rank(overflow);
  // Fused AdamW multiplies the gradients by the clipping coefficient as it reads them, which saves
  // a pass over every gradient (one over host copies says it does not: they are copied unclipped).
  torch::Tensor clip_coef;
  const bool fold_clip = optimizer_->folds_grad_scale();
  r.grad_norm = par_.gradients->clip_grad_norm(s_.train.max_grad_norm, fold_clip ? &clip_coef : nullptr);
  optimizer_->set_grad_scale(clip_coef);
  r.lr = schedule_->at(t_.step);
  const int64_t step = t_.step + 1;
  bool nan_skip = false;
  if (!overflow && !step_is_finite(r.loss, r.grad_norm)) {
    const std::string message = non_finite_message(step, r.loss.item<double>(), r.grad_norm.item<double>(),
                                                   first_non_finite(par_.share.weights), s_.train.nan_policy);
    if (s_.train.nan_policy == NanPolicy::kAbort) throw runtime_error(message);
    progress_->finish();
    spdlog::warn("{}", message);
    nan_skip = s_.train.nan_policy == NanPolicy::kSkip;
    t_.nan_skipped_steps += nan_skip ? 1 : 0;
  }
  bool spike_skip = false;
  if (!overflow && !nan_skip && spike_guard_) {
    const double loss = r.loss.item<double>(), grad_norm = r.grad_norm.item<double>();
    spike_skip = on_spike(step, loss, grad_norm, spike_guard_->judge(loss, grad_norm));
  }
  if (!overflow && !nan_skip && !spike_skip) {
    optimizer_->step(r.lr);
    par_.gradients->after_optimizer_step();  // ZeRO: owners send their updated parameters
  }
  if (expert_balance_) expert_balance_->after_step(model_, *groups_, !overflow && !nan_skip && !spike_skip);
  precision_->update(overflow);
  // Every parameter's, not just the optimizer's (under ZeRO it holds a share of them).
  // A captured step graph keeps them: they are its outputs, overwritten by the next replay.
  if (!passes_->keeps_gradients())
    for (const auto& p : params_) p.mutable_grad() = torch::Tensor();
  t_.step = step;
  skips_.count(step, overflow, nan_skip, spike_skip, precision_->loss_scale());
  end_host_cache_step();  // after the gradients are freed: the next step reuses their blocks
  if (s_.train.empty_cache_steps > 0 && step % s_.train.empty_cache_steps == 0) release_cached_memory(plan_.device);
  t_.tokens += step_tokens;
  interval_.tokens += step_tokens;
  ++interval_.steps;
  interval_.loss = interval_.loss.defined() ? interval_.loss + r.loss : r.loss;
  objective_metrics_->add_step(micro, *groups_, step_units);
  return r;
}

// A loss spike (train/spike_guard.h): warned about, counted, its update dropped; under rollback the
// last checkpoint's weights, optimizer state and routing biases come back too (the step count, schedule and data
// position go on: the data read since that checkpoint is skipped). Returns whether it was a spike.
bool Trainer::on_spike(int64_t step, double loss, double grad_norm, const SpikeVerdict& v) {
  if (!v.spike) return false;
  json event = spike_event(step, loss, grad_norm, v);
  std::string action = "update skipped";
  if (s_.train.spike_policy == SpikePolicy::kRollback && last_saved_step_ > 0) {
    if (t_.spike_rollbacks >= s_.train.spike_max_rollbacks)
      throw runtime_error(too_many_rollbacks_message(step, loss, v, t_.spike_rollbacks));
    roll_back();
    ++t_.spike_rollbacks;
    event["rolled_back_to"] = last_saved_step_;
    action = fmt::format("rolled back to the checkpoint of step {}", last_saved_step_);
  } else {
    if (s_.train.spike_policy == SpikePolicy::kRollback) action += " (no checkpoint yet to roll back to)";
    ++t_.spike_skipped_steps;
  }
  event["action"] = action;
  if (spike_events_.size() < 1000) spike_events_.push_back(event);
  progress_->finish();
  spdlog::warn("{}", spike_warning(step, loss, grad_norm, v, s_.train.spike_window, action));
  return true;
}

// The weights, optimizer state and routing biases of the last checkpoint this run saved, in place. Every rank
// reads it once rank 0 has written it (the agreement below waits for rank 0, whose save came first).
void Trainer::roll_back() {
  saver_.wait();
  groups_->any_rank(false, "agreement on a rollback");
  ResumeSource back = ResumeSource::rollback(ckpt_root_ / step_name(last_saved_step_),
                                             gputrain::optimizer_row_share(par_.share.layout, s_.optim), par_, shapes_,
                                             !lora_base_.empty());
  back.apply(model_, *groups_, par_, *optimizer_, *precision_, shapes_);
  if (expert_balance_) expert_balance_->restore(back.snapshot().expert_bias, model_, back.dir().string());
  if (const StoredWeights* files = back.reread())
    spdlog::info(
        weights_read_line(*groups_, files->bytes_read(), files->bytes_stored(), "checkpoint " + back.dir().string()));
}

// Before the model is built, the layout the settings give this rank (parallelize's, par_.share.layout).
std::optional<RowShare> Trainer::optimizer_row_share() const {
  const Grid g(s_.parallel, plan_.group_world.size);
  return gputrain::optimizer_row_share(
      rank_layout(gpt_parameter_shapes(s_.model), s_.model, s_.parallel, g, plan_.group_world.rank), s_.optim);
}

// A line of metrics.jsonl (the metrics contract) and the progress line, for the steps since the last.
void Trainer::log_step(const StepResult& r, int64_t step, bool eval_now) {
  synchronize(plan_.device);
  const double elapsed = seconds_since(interval_.start);
  const double loss_now = r.loss.item<double>();
  const double mean_loss = interval_.loss.item<double>() / static_cast<double>(interval_.steps);
  t_.last_loss = loss_now;
  json rec;
  rec["step"] = step;
  rec["loss"] = round_to(loss_now, 6);       // null when not finite (a skipped or warned step)
  rec["loss_avg"] = round_to(mean_loss, 6);  // mean over the steps since the last line
  rec["lr"] = r.lr;
  rec["grad_norm"] = round_to(r.grad_norm.item<double>(), 6);
  rec["tokens"] = t_.tokens;
  if (const MixtureWindows* mix = train_source_->mixture())  // tokens read from each source (data/mixture.h)
    rec["tokens_by_source"] = mixture_report(*mix, train_loader_->next_sample(), s_.model.seq_len, false);
  rec["tokens_per_s"] = round_to(static_cast<double>(interval_.tokens) / elapsed, 1);
  rec["step_ms"] = round_to(1000.0 * elapsed / static_cast<double>(interval_.steps), 3);
  if (auto u = mfu(rec["tokens_per_s"].get<double>())) rec["mfu"] = round_to(*u, 4);
  rec["mem_peak_mb"] = round_to(peak_memory_mb(plan_.device), 1);
  if (precision_->has_scaler()) {
    rec["loss_scale"] = precision_->loss_scale();
    rec["skipped_steps"] = precision_->skipped_steps();  // since the start of the run
  }
  if (t_.nan_skipped_steps > 0) rec["nan_skipped_steps"] = t_.nan_skipped_steps;
  if (t_.spike_skipped_steps > 0) rec["spike_skipped_steps"] = t_.spike_skipped_steps;
  if (t_.spike_rollbacks > 0) rec["spike_rollbacks"] = t_.spike_rollbacks;
  moe_metrics_.add_to(rec, model_, *groups_);  // model.moe: balancing loss, dropped tokens (a collective)
  objective_metrics_->write_line(rec);         // the objective's (preference: rewards/*), since the last line
  if (eval_now) rec["eval_loss"] = round_to(evaluate(), 6);
  if (eval_now) rec.update(eval_metrics_);
  if (metrics_) metrics_->write(rec);
  if (tensorboard_) tensorboard_->scalars(rec);
  progress_->update(step, loss_now, static_cast<double>(interval_.tokens) / elapsed, r.lr,
                    elapsed / static_cast<double>(interval_.steps));
  interval_ = LogInterval{};
}

double Trainer::evaluate() {
  double l = 0;
  int64_t units = 0;
  auto run = [&] {
    l = s_.train.eval_full
            ? evaluate_every_window(*passes_, *groups_, *eval_source_, s_, plan_.dp, plan_.device,
                                    par_.pipeline != nullptr, par_.share.fully_sharded != nullptr, &units)
            : passes_->evaluate(eval_batches_);
  };
  // A captured step graph lends its memory pool, idle between replays (train/step_graph.h).
  passes_->run_in_step_memory(run);
  // The objective's metrics over the evaluation: each rank's share of the whole set, or the same batches.
  if (!s_.train.eval_full)
    for (const Batch& b : eval_batches_) units += objective_.units(b);
  eval_metrics_ = objective_metrics_->evaluation(passes_->take_eval_metric_sums(), units,
                                                 s_.train.eval_full ? groups_.get() : nullptr, plan_.device);
  if (!std::isfinite(l)) throw runtime_error("evaluation loss is not finite at step " + std::to_string(t_.step));
  t_.last_eval = l;
  progress_->finish();
  spdlog::info("eval at step {}: loss {:.4f}{}", t_.step, l,
               floor_ ? fmt::format(" (floor {:.4f}, gap {:.4f})", *floor_, l - *floor_) : std::string());
  return l;
}

// A checkpoint of this step. A parallel run's ranks each write what they hold (no gathering), and
// rank 0 commits once all have; under checkpoint.async from a host copy, on the saver's thread.
void Trainer::save() {
  if (t_.step == last_saved_step_) return;
  const auto t0 = Clock::now();
  TrainingCounters counters = t_;
  counters.metrics_bytes = metrics_ ? metrics_->bytes() : 0;
  auto snap = std::make_shared<TrainingSnapshot>(
      snapshot_of_run(counters, s_, train_sampler_->state(train_loader_->next_sample()), *precision_, plan_.device,
                      *optimizer_, *groups_, par_, lora_base_));
  if (expert_balance_) snap->expert_bias = expert_balance_->state();
  std::optional<CheckpointJoin> join;
  if (const World& world = groups_->world(); groups_->distributed())
    join = CheckpointJoin{save_writer_, world.rank, world.size, s_.parallel.timeout_s, saver_.cancelled()};
  last_saved_step_ = t_.step;
  const bool async = s_.checkpoint.async;
  if (async) copy_to_host(*snap);  // training changes the tensors in place from the next step on
  auto write = [this, snap, join, t0, async, root = ckpt_root_, keep = s_.checkpoint.keep_last] {
    failpoint("checkpoint.write");  // tests hold an asynchronous write here while training goes on
    const fs::path dir = save_training_checkpoint(root, *snap, join);
    if (!plan_.lead) return;
    prune_checkpoints(root, keep);
    const double took = seconds_since(t0);
    wall_time_->save_took(took);
    if (!async) progress_->finish();
    spdlog::info("checkpoint: step {} saved to {} in {:.2f} s{}", snap->counters.step, dir.string(), took,
                 async ? " (in the background)" : "");
  };
  if (async) saver_.start(std::move(write));
  else write();
}

json Trainer::summary(const std::string& status) const {
  SummaryParts parts;
  parts.world_size = plan_.world.size;
  if (const MixtureWindows* mix = train_source_->mixture())
    parts.data_sources = mixture_report(*mix, train_loader_->next_sample(), s_.model.seq_len, true);
  parts.mfu = mfu(run_tokens_per_s(t_));
  if (s_.model.lora.rank > 0) parts.lora = lora_report(s_, optimizer_->state_bytes());
  if (s_.model.moe.enabled()) parts.moe = moe_metrics_.summary(s_.model);
  if (auto graph = passes_ ? passes_->graph_report() : std::nullopt) parts.cuda_graphs = *graph;
  if (spike_guard_) parts.spikes = spike_report(s_.train, t_.spike_skipped_steps, t_.spike_rollbacks, spike_events_);
  parts.bf16_copy_tensors = copies_.tensors, parts.bf16_copy_bytes = copies_.bytes;
  if (groups_->distributed()) {
    const Grid& grid = groups_->grid();
    parts.parallel = {{"zero", s_.parallel.zero},
                      {"grid", {{"dp", grid.dp()}, {"pp", grid.pp()}, {"tp", grid.tp()}, {"cp", grid.cp()}}}};
    if (par_.pipeline) parts.parallel["pipeline"] = pipeline_report(par_.pipeline->layout());
  }
  return build_summary(
      status, t_, s_, *optimizer_,
      SummaryFacts{plan_.device, plan_.threads, n_params_, precision_->skipped_steps() + t_.nan_skipped_steps, floor_,
                   seconds_since(t_start_)},
      parts);
}

// Rank 0's summary.json, and the summary as text in TensorBoard.
void Trainer::write_summary(const json& j) {
  if (!plan_.lead) return;
  write_file_atomic((out_dir_ / "summary.json").string(), j.dump(2) + "\n");
  if (tensorboard_) tensorboard_->text("summary", j.dump(2), t_.step);
}

// summary.json, after the reports that need every rank (collectives: every rank gets here).
RunOutcome Trainer::finish() {
  json j = summary(status_);
  RankMemory mine = par_.gradients->memory(*optimizer_);
  if (par_.pipeline) mine = par_.pipeline->with_stage_memory(mine);
  j["memory_per_rank"] = memory_per_rank_report(memory_per_rank(*groups_, mine));
  if (groups_->distributed()) j["grad_sync"] = grad_sync_report(par_.gradients->sync_times());
  if (par_.share.fully_sharded)
    j["zero3"] =
        shard_traffic_report(par_.share.fully_sharded->traffic(), t_.step - std::max<int64_t>(t_.resumed_from, 0));
  write_summary(j);
  spdlog::info("{}", finish_line(status_, t_, seconds_since(t_start_), j["tokens_per_s"].get<double>()));
  return RunOutcome{status_, stop_signal_, j};
}

RunOutcome run_training(const Recipe& recipe, const RunOptions& options) { return Trainer(recipe, options).run(); }

}  // namespace gputrain
