#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/schema.h"
#include "data/loader.h"
#include "data/rng.h"
#include "metrics/flops.h"
#include "metrics/metrics_writer.h"
#include "util/atomic_file.h"
#include "metrics/progress.h"
#include "metrics/step_profiler.h"
#include "model/activation_checkpointing.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/lora.h"
#include "optim/cpu_offload.h"
#include "optim/make_optimizer.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "optim/param_groups.h"
#include "parallel/grid.h"
#include "parallel/parallel_run.h"
#include "parallel/world.h"
#include "precision/precision.h"
#include "train/batch_finder.h"
#include "train/model_options_report.h"
#include "train/nan_guard.h"
#include "train/resume.h"
#include "train/step_graph.h"
#include "train/train_step.h"
#include "train/weight_copies.h"
#include "util/cpu_memory.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/signals.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One run per folder (util/dir_lock.h): rank 0 locks the output directory and the
// checkpoint directory (when it is another one: it may be a second run's output) before
// it reads or removes anything in them. Held, the lock proves every earlier save's writer gone.
std::vector<DirectoryLock> lock_run_directories(const Settings& s) {
  const fs::path out = s.resolved_output_dir(), ckpt = s.resolved_checkpoint_dir();
  for (const auto& [dir, what] : {std::pair{out, "output"}, std::pair{ckpt, "checkpoint"}}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw runtime_error(fmt::format("cannot create {} directory '{}': {}", what, dir.string(), ec.message()));
  }
  std::vector<DirectoryLock> locks;
  locks.push_back(DirectoryLock::acquire(out, "use another --output-dir"));
  std::error_code ec;
  if (!fs::equivalent(out, ckpt, ec)) locks.push_back(DirectoryLock::acquire(ckpt, "set another checkpoint.dir"));
  if (locks.back().held()) clear_abandoned_saves(ckpt, /*other_hosts=*/true);
  return locks;
}

// `continuing`: a resumed run that writes where the checkpoint's run did (it appends).
// (Rank 0 created it when it locked it: lock_run_directories.)
fs::path prepare_output_dir(const Settings& s, const RunOptions& o, bool continuing) {
  fs::path dir = s.resolved_output_dir();
  if (!continuing && !o.overwrite && (fs::exists(dir / "metrics.jsonl") || fs::exists(dir / "summary.json")))
    throw usage_error("output directory '" + dir.string() + "' already holds a run (metrics.jsonl) and no checkpoint " +
                      "to continue from (checkpoint.resume: " + s.checkpoint.resume + ")" +
                      "\n    fix: choose another with --output-dir, or pass --overwrite to replace it");
  return dir;
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  return fs::weakly_canonical(a, ec1) == fs::weakly_canonical(b, ec2) && !ec1 && !ec2;
}

// The checkpoint this run continues from, loaded (checkpoint.resume; train/resume.h).
// auto passes over a checkpoint that fails to load, with a warning; a named one is an error.
std::optional<std::pair<fs::path, TrainingSnapshot>> load_resume_checkpoint(const Settings& s) {
  for (const fs::path& dir : resume_candidates(s)) {
    try {
      return std::make_pair(dir, load_training_checkpoint(dir));
    } catch (const Error& e) {
      if (s.checkpoint.resume != "auto") throw;
      spdlog::warn("checkpoint: passing over {}: {}", dir.string(), e.what());
    }
  }
  return std::nullopt;
}

// --overwrite starts afresh: the earlier run's checkpoints would otherwise be
// taken for this run's by a later resume: auto.
void remove_old_checkpoints(const Settings& s) {
  const CheckpointListing l = list_checkpoints(s.resolved_checkpoint_dir());
  std::error_code ec;
  for (const auto& dir : l.complete) fs::remove_all(dir, ec);
  for (const auto& [dir, _] : l.broken) fs::remove_all(dir, ec);
  if (!l.complete.empty() || !l.broken.empty())
    spdlog::warn("--overwrite: removed {} checkpoint(s) of the earlier run in {}", l.complete.size() + l.broken.size(),
                 s.resolved_checkpoint_dir());
}

double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

// What the loop has done so far; the summary is built from it on every exit path.
// The counters a checkpoint saves (TrainingCounters), and what only this process knows.
struct Totals : TrainingCounters {
  double mem_start_mb = 0;  // CPU: resident memory before the model was built (LibTorch, data maps)
  std::string stop_reason;  // why a run stopped early: "SIGTERM", "max_wall_time", ...
  int64_t resumed_from = -1;  // the checkpoint step this process started at
};

// summary.json (the metrics contract) for a run that ended with `status`.
json build_summary(const std::string& status, const Totals& t, const Settings& s, const torch::Device& device,
                   int64_t threads, int64_t n_params, const Optimizer& optimizer, int64_t skipped_steps,
                   std::optional<double> floor, double wall_s) {
  json j;
  j["status"] = status;
  if (!t.stop_reason.empty()) j["stop_reason"] = t.stop_reason;
  if (t.resumed_from >= 0) j["resumed_from_step"] = t.resumed_from;
  j["steps"] = t.step;
  j["max_steps"] = s.train.max_steps;
  j["tokens"] = t.tokens;
  j["wall_s"] = round_to(wall_s, 3);  // this process
  j["train_s"] = round_to(t.train_seconds, 3);  // the whole run, resumed parts included
  j["tokens_per_s"] = round_to(t.train_seconds > 0 ? static_cast<double>(t.tokens) / t.train_seconds : 0.0, 1);
  j["final_loss"] = std::isfinite(t.last_loss) ? json(round_to(t.last_loss, 6)) : json(nullptr);
  j["eval_loss"] = t.last_eval ? json(round_to(*t.last_eval, 6)) : json(nullptr);
  if (floor) j["entropy_floor"] = round_to(*floor, 6);
  j["mem_peak_mb"] = round_to(peak_memory_mb(device), 1);
  if (device.is_cpu()) j["mem_start_mb"] = round_to(t.mem_start_mb, 1);  // resident before the model existed
  j["precision"] = settings_to_json(s)["precision"]["mode"];
  j["per_device_batch_size"] = s.train.per_device_batch_size;
  j["grad_accum_steps"] = s.train.grad_accum_steps;
  j["skipped_steps"] = skipped_steps;
  j["parameters"] = n_params;
  j["optimizer"] = optimizer.describe();
  j["optimizer_state_mb"] = round_to(static_cast<double>(optimizer.state_bytes()) / (1024.0 * 1024.0), 3);
  j["device"] = device_name(device);
  j["threads"] = threads;
  j["torch_version"] = TORCH_VERSION;
  j["recipe_hash"] = recipe_hash(s);
  return j;
}


// One forward and backward of a `batch`-sequence micro-batch: does it fit in
// device memory? Out-of-memory is caught, and the memory released either way.
bool fits_on_device(Gpt& model, const Precision& precision, const ModelSettings& m, int64_t batch,
                    torch::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);  // leaves the run's random streams alone
  auto tokens = at::randint(0, m.vocab_size, {batch, m.seq_len}, gen, torch::kLong).to(device);
  bool ok = true;
  try {
    accumulate_gradients(model, {Batch{tokens, tokens, batch * m.seq_len}}, &precision);
    synchronize(device);
  } catch (const c10::OutOfMemoryError&) {
    ok = false;
  }
  model->zero_grad();  // sets the gradients to none
  release_cached_memory(device);
  return ok;
}

// kernels.cuda_graphs (train/step_graph.h) for this run: null when it is off or the run is on the CPU.
std::unique_ptr<StepGraph> step_graph_for(const Settings& s, const ParallelRun& par, const World& world,
                                          torch::Device device, const std::vector<torch::Tensor>& params) {
  if (!s.kernels.cuda_graphs) return nullptr;
  if (!device.is_cuda()) {
    if (s.run.device != "cpu")  // (validation warns for "cpu")
      spdlog::warn("kernels.cuda_graphs has no effect on the CPU: training without CUDA graphs");
    return nullptr;
  }
  if (par.distributed())
    throw config_error("kernels.cuda_graphs captures the step of a single process, and this one runs in a world of " +
                       std::to_string(world.size) + " (" + world.describe() +
                       ")\n    fix: set kernels.cuda_graphs: false for multi-process runs");
  spdlog::info("kernels.cuda_graphs: each step's forward and backward are captured as a CUDA graph after {} eager "
               "steps, then replayed", StepGraph::kWarmupSteps);
  return make_step_graph(device, params);
}

}  // namespace

RunOutcome run_training(const Recipe& recipe, const RunOptions& options) {
  Settings s = recipe.settings;  // a copy: batch size auto fills in the chosen split
  const auto t_start = Clock::now();

  const World world = detect_world_from_environment();
  const bool lead = world.rank == 0;  // only rank 0 writes files and logs progress
  // dp auto = world / (tp x pp), resolved before a checkpoint's recipe is compared (and checked: a config error).
  s.parallel.dp = Grid(s.parallel, world.size).dp();
  if (!lead) spdlog::set_level(spdlog::level::warn);
  // run.threads auto shares this machine's cores among its processes.
  const int64_t threads = s.run.threads > 0 ? s.run.threads : std::max<int64_t>(1, resolve_threads(0) / world.local_size);
  at::set_num_threads(static_cast<int>(threads));
  const torch::Device device = device_for_local_rank(resolve_device(s.run.device), world.local_rank);
  if (device.is_cpu() && s.run.cpu_malloc_cache) keep_freed_cpu_memory_for_reuse();
  // Data first: a bad data file stops the run before anything is written.
  const auto seed = static_cast<uint64_t>(s.run.seed);
  auto train_source = make_window_source(s.data.train, s.model, "data.train");
  std::unique_ptr<WindowSource> eval_source;
  if (s.data.eval.format != DataFormat::kNone) eval_source = make_window_source(s.data.eval, s.model, "data.eval");
  // Before this run reads a checkpoint or removes one: a second run into a live one's folder stops here.
  std::vector<DirectoryLock> dir_locks;
  if (lead) dir_locks = lock_run_directories(s);

  // The checkpoint to continue from, checked against this recipe before anything is written.
  if (options.overwrite && s.checkpoint.resume == "auto") {
    s.checkpoint.resume = "never";
    if (lead) remove_old_checkpoints(s);
  }
  const auto t_load = Clock::now();
  std::optional<std::pair<fs::path, TrainingSnapshot>> resumed = load_resume_checkpoint(s);
  const double load_s = seconds_since(t_load);
  bool continuing = false;  // appending to the checkpoint run's own metrics
  if (resumed) {
    const TrainingSnapshot& snap = resumed->second;
    int64_t snap_dp = 1;  // the world the checkpoint was saved in
    if (auto p = snap.settings.find("parallel"); p != snap.settings.end())
      if (auto d = p->find("dp"); d != p->end() && d->is_number_integer()) snap_dp = d->get<int64_t>();
    if (s.train.per_device_batch_size == 0 && snap_dp == s.parallel.dp &&
        s.train.global_batch_size == snap.per_device_batch_size * snap.grad_accum_steps * snap_dp) {
      // Batch size auto keeps the split it chose (free memory may differ now).
      s.train.per_device_batch_size = snap.per_device_batch_size;
      s.train.grad_accum_steps = snap.grad_accum_steps;
      s.train.global_batch_size = 0;
    }
    const ResumeChanges changes = compare_for_resume(snap.settings, settings_to_json(s), resumed->first);
    for (const auto& c : changes.reported) spdlog::info("resume: {} changed from {} to {}", c.key, c.saved, c.now);
    for (const auto& c : changes.diverging)
      spdlog::warn("resume: {} changed from {} to {}; the run continues, but not as the saved one would have", c.key,
                   c.saved, c.now);
    continuing = same_directory(snap.settings["run"]["output_dir"].get<std::string>(), s.resolved_output_dir());
  }
  const fs::path out_dir = lead ? prepare_output_dir(s, options, continuing) : fs::path(s.resolved_output_dir());
  const fs::path ckpt_root = s.resolved_checkpoint_dir();
  // The rendezvous comes after rank 0's own checks: if they fail, the other
  // ranks' wait ends with an error naming rank 0 (the launcher stops them sooner).
  // A launcher's world of one (srun -n 1, torchrun --nproc-per-node 1) takes the multi-process code path,
  // whose collectives a captured step cannot hold (kernels.cuda_graphs): it trains as the single process it is.
  World par_world = world;
  if (s.kernels.cuda_graphs && device.is_cuda() && world.size == 1 && world.launched()) {
    par_world = World{};
    spdlog::info("kernels.cuda_graphs: a world of one ({}) trains as a single process, without a process group",
                 world.describe());
  }
  ParallelRun par(par_world, s.parallel, device);
  const int64_t dp = s.parallel.dp;  // data-parallel replicas (resolved above from the grid)
  if (s.train.per_device_batch_size > 0 && s.train.global_batch_size > 0 &&
      s.train.global_batch_size != s.train.per_device_batch_size * s.train.grad_accum_steps * dp)
    throw config_error("train.global_batch_size (" + std::to_string(s.train.global_batch_size) +
                       ") is not per_device_batch_size x grad_accum_steps x the " + std::to_string(dp) +
                       " processes (" + std::to_string(s.train.per_device_batch_size * s.train.grad_accum_steps * dp) +
                       ")\n    fix: remove it, or set per_device_batch_size: auto to let the finder choose the split");

  Totals t;
  t.mem_start_mb = current_rss_mb();
  Precision precision(s.precision, device);
  // A checkpoint of LoRA adapters only needs the frozen base built as the run built it (model.init_from).
  const bool adapters_only = resumed && !resumed->second.lora_base.empty();
  std::string loaded;
  Gpt model = build_initial_model(s, device, precision.weight_dtype(), /*skip_init_from=*/resumed && !adapters_only, &loaded);
  model->train();
  if (!loaded.empty()) spdlog::info("model: {}", loaded);
  if (resumed) {
    const std::string source = "checkpoint '" + resumed->first.string() + "'";
    if (adapters_only) check_lora_base(module_weights(*model), resumed->second.lora_base, resumed->first.string(), s.model.init_from);
    load_module_weights(*model, resumed->second.model, source, "resume with the model settings the checkpoint was saved with",
                        adapters_only ? std::function<bool(const std::string&)>(is_lora_parameter) : nullptr);
  }
  // Checkpoints of adapters only record the base's fingerprint (taken from the base as loaded, also
  // from a checkpoint of every weight), to resume on the same base.
  std::string lora_base;
  if (s.model.lora.rank > 0 && s.model.lora.save == LoraSave::kAdapters) lora_base = lora_base_fingerprint(module_weights(*model));
  const int64_t n_params = model->parameter_count();  // the whole model's, before tensor parallelism keeps a shard
  par.shard_model(model);  // parallel.tp > 1: this rank's slices of the split layers; pp > 1: its stage
  const int64_t recomputed_blocks =
      apply_activation_checkpointing(model, s.train.gradient_checkpointing, s.train.checkpoint_every);
  const std::vector<NamedTensor> named_params = par.held(module_weights(*model));
  std::vector<torch::Tensor> params;
  for (const auto& p : named_params) params.push_back(p.tensor);
  par.attach(named_params);  // the dp group's first weights in every replica, gradient hooks, ZeRO ownership
  std::vector<ParamGroup> groups = par.owned_groups(make_param_groups(*model, s.optim));
  std::unique_ptr<CpuOffload> offload;  // parallel.offload_optimizer: state and update on the CPU
  if (s.parallel.offload_optimizer && device.is_cuda()) {
    offload = std::make_unique<CpuOffload>(groups);
    groups = offload->cpu_groups();
  }
  if (s.parallel.offload_optimizer && !device.is_cuda() && s.run.device != "cpu")  // (validation warns for "cpu")
    spdlog::warn("parallel.offload_optimizer has no effect on the CPU (the optimizer state is there already)");
  std::unique_ptr<Optimizer> optimizer = make_optimizer(groups, s.optim);
  const WeightCopies copies = attach_weight_copies(model, *optimizer, precision, par.runs_head());
  if (copies.tensors > 0)
    spdlog::info("bf16 weight copies: {} weights ({:.1f} MiB) kept by the optimizer, so autocast casts none of them",
                 copies.tensors, static_cast<double>(copies.bytes) / (1024.0 * 1024.0));
  LrSchedule schedule(s.optim, s.train.max_steps);
  std::unique_ptr<StepGraph> step_graph = step_graph_for(s, par, world, device, params);
  if (s.train.per_device_batch_size == 0) {
    // The global batch is split over the ranks first, then into micro-batches.
    if (s.train.global_batch_size % dp != 0)
      throw config_error("train.global_batch_size (" + std::to_string(s.train.global_batch_size) +
                         ") must divide evenly over the " + std::to_string(dp) +
                         " data-parallel processes\n    fix: make it a multiple of " + std::to_string(dp));
    s.train.global_batch_size /= dp;
    const double budget = cpu_memory_budget_bytes(s);
    if (!device.is_cpu() && (s.parallel.tp > 1 || s.parallel.pp > 1 || s.parallel.ep > 1))  // trial steps would run collectives that an OOM on one rank leaves hanging
      throw config_error("train.per_device_batch_size: auto tries batch sizes on the GPU, which a tensor-, pipeline- "
                         "or expert-parallel run (parallel.tp, pp or ep > 1) cannot do\n    fix: set "
                         "train.per_device_batch_size (`gputrain plan` estimates what fits)");
    const BatchChoice choice =
        device.is_cpu() ? find_batch_size_cpu(s, budget)
                        : find_batch_size(s.train.global_batch_size, [&](int64_t b) {
                            return fits_on_device(model, precision, s.model, b, device);
                          });
    choice.apply_to(s.train);
    s.train.global_batch_size *= dp;  // the recipe's meaning again: all processes
    spdlog::info("{}{}", choice.describe(),
                 device.is_cpu() ? fmt::format(" (CPU: memory plan against {:.0f} MiB)", budget / (1024.0 * 1024.0))
                                 : std::string(" (trial steps on the GPU)"));
  }
  if (par.pipelined() && s.parallel.pp_microbatches > 0)  // validate could not check it with batch size auto
    check_micro_batch_split(s.train.per_device_batch_size * s.train.grad_accum_steps, s.parallel.pp_microbatches);
  if (lead) write_file_atomic((out_dir / "recipe.resolved.yaml").string(), recipe_to_yaml(s));

  std::vector<Batch> eval_batches;
  if (eval_source) {
    WindowSampler eval_sampler(eval_source->window_count(), SamplerOptions{seed, kEvalStream});
    BatchLoader eval_loader(*eval_source, eval_sampler, loader_options(s, s.data.eval, device, 0));
    for (int64_t i = 0; i < s.train.eval_steps; ++i) eval_batches.push_back(eval_loader.next());
  }
  WindowSampler train_sampler(train_source->window_count(), SamplerOptions{seed, kTrainStream});
  LoaderOptions train_options = loader_options(s, s.data.train, device, s.data.num_workers);
  train_options.shard = par.dp_rank();  // each replica reads its share of every global batch (its tp ranks the same)
  train_options.shards = dp;
  int64_t first_sample = 0;
  if (resumed) {
    TrainingSnapshot& snap = resumed->second;
    std::map<std::string, torch::Tensor> state;
    // parallel.tp is the checkpoint's (resume refuses a change): this rank's tp shard of the state.
    for (const auto& e : snap.optimizer_shards.empty() ? snap.optimizer_state
                                                       : snap.optimizer_shards.at(static_cast<size_t>(par.tp_rank())))
      state[e.name] = e.tensor;
    optimizer->load_state(par.owned_state(std::move(state)));
    if (precision.scaler() && snap.scaler) precision.scaler()->load_state(*snap.scaler);
    first_sample = train_sampler.resume_sample(snap.sampler);  // O(1): no data is replayed
    static_cast<TrainingCounters&>(t) = snap.counters;
    t.resumed_from = snap.counters.step;
  }
  BatchLoader train_loader(*train_source, train_sampler, train_options, first_sample);

  const std::optional<double> floor = train_source->entropy_floor(s.model.seq_len);
  spdlog::info("gputrain: {} on {} ({} threads), recipe {}", s.run.name, device_name(device), threads, recipe.source);
  const bool llama = s.model.arch == ModelArch::kLlama;
  spdlog::info("model: {} {} layers, d_model {}, {} heads{}, seq_len {}, vocab {}: {:.2f}M parameters",
               llama ? "Llama" : "GPT", s.model.n_layer, s.model.d_model, s.model.n_head,
               s.model.kv_heads() != s.model.n_head ? fmt::format(" ({} key/value)", s.model.kv_heads()) : "",
               s.model.seq_len, s.model.vocab_size, n_params / 1e6);
  if (s.model.lora.rank > 0) spdlog::info("model: {}", lora_log_line(s));
  if (s.model.moe.enabled())
    spdlog::info("model: mixture of experts every {} block(s): {} experts, top {}, capacity factor {}; {:.2f}M of the "
                 "parameters are active per token",
                 s.model.moe.every, s.model.moe.experts, s.model.moe.top_k, s.model.moe.capacity_factor,
                 active_parameters(s.model) / 1e6);
  spdlog::info("precision: {}", precision.describe());
  spdlog::info("optimizer: {}; {:.1f} MiB of state ({:.2f} bytes per parameter)", optimizer->describe(),
               optimizer->state_bytes() / (1024.0 * 1024.0),
               static_cast<double>(optimizer->state_bytes()) / static_cast<double>(model->parameter_count()));
  if (offload)
    spdlog::info("optimizer: offloaded: state, update and a {:.1f} MiB copy of the parameters in pinned host memory",
                 offload->host_bytes() / (1024.0 * 1024.0));
  if (recomputed_blocks > 0)
    spdlog::info("activation checkpointing: {} of {} blocks recomputed in backward", recomputed_blocks, s.model.n_layer);
  spdlog::info("data: {}", train_source->describe());
  if (train_sampler.samples_per_epoch() > 0) {
    const double epochs = static_cast<double>(s.train.max_steps * s.train.grad_accum_steps * s.train.per_device_batch_size) /
                          static_cast<double>(train_sampler.samples_per_epoch());
    spdlog::info("data: {} windows per epoch; {} steps read {:.2f} epochs", train_sampler.samples_per_epoch(),
                 s.train.max_steps, epochs);
  }
  if (floor) spdlog::info("data: entropy floor {:.4f} nats/token (no model can reach a lower loss)", *floor);
  spdlog::info("train: {} steps x {} tokens ({}grad_accum {} x batch {} x seq_len {}); output in {}", s.train.max_steps,
               s.tokens_per_step() * dp, dp > 1 ? fmt::format("{} processes x ", dp) : std::string(),
               s.train.grad_accum_steps, s.train.per_device_batch_size, s.model.seq_len, out_dir.string());
  if (par.distributed()) spdlog::info("parallel: {}", par.describe());
  if (resumed)
    spdlog::info("resume: continuing from {} at step {} ({} tokens seen; verified and read in {:.2f} s); data from "
                 "sample {}", resumed->first.string(), t.step, t.tokens, load_s, first_sample);
  for (const auto& w : recipe.warnings) spdlog::warn("{}", w.str());

  std::optional<MetricsWriter> metrics;  // rank 0's
  if (lead && continuing) metrics.emplace((out_dir / "metrics.jsonl").string(), t.metrics_bytes);
  if (lead && !continuing) metrics.emplace((out_dir / "metrics.jsonl").string());
  Progress progress(lead ? s.metrics.progress : ProgressStyle::kOff, s.train.max_steps);
  StopSignals signals(s.checkpoint.preempt_signals);
  // Each process profiles itself: profile/ alone, profile/rank<N>/ with several.
  StepProfiler profiler(s.metrics.profile_at, s.metrics.profile_steps, device,
                        world.size > 1 ? out_dir / "profile" / fmt::format("rank{}", world.rank) : out_dir / "profile");
  reset_peak_memory(device);
  // The generators last: building the model and the batches above drew from them.
  if (resumed) {
    RngSnapshot rng = resumed->second.rng;
    if (!device.is_cuda()) rng.cuda = torch::Tensor();  // saved on a GPU, resumed on the CPU
    if (device.is_cuda() && rng.cuda.defined()) rng.cuda_index = device.index();
    restore_rng(rng);
    resumed.reset();  // the saved tensors are copied in; free them
  }

  // MFU needs a GPU whose peak is known (metrics/flops.h); elsewhere the key is left out.
  const double flops_per_token = training_flops_per_token(s.model);
  const std::string device_label = device_name(device);
  MoeMetrics moe_metrics;
  auto summary_for = [&](const std::string& status) {
    json j = build_summary(status, t, s, device, threads, n_params, *optimizer,
                           precision.skipped_steps() + t.nan_skipped_steps, floor, seconds_since(t_start));
    j["world_size"] = world.size;
    if (auto mfu = model_flops_utilization(j["tokens_per_s"].get<double>(), flops_per_token, world.size, device_label))
      j["mfu"] = round_to(*mfu, 4);
    if (s.model.lora.rank > 0) j["lora"] = lora_report(s, optimizer->state_bytes());
    if (s.model.moe.enabled()) j["moe"] = moe_metrics.summary(s.model);
    if (step_graph) j["cuda_graphs"] = step_graph->report();
    if (copies.tensors > 0)
      j["bf16_weight_copies"] = {{"tensors", copies.tensors},
                                 {"mb", round_to(static_cast<double>(copies.bytes) / (1024.0 * 1024.0), 3)}};
    if (par.distributed()) {
      j["zero"] = s.parallel.zero;
      j["grid"] = {{"dp", par.grid().dp()}, {"pp", par.grid().pp()}, {"tp", par.grid().tp()}};
      if (par.pipelined()) j["pipeline"] = par.pipeline_report();
    }
    return j;
  };

  int64_t last_saved_step = t.step;  // a resumed run's step is on disk already
  double last_save_s = 0;
  auto save_checkpoint = [&]() {
    if (t.step == last_saved_step) return;
    const auto t0 = Clock::now();
    TrainingSnapshot snap;
    snap.counters = t;
    snap.counters.metrics_bytes = metrics ? metrics->bytes() : 0;
    snap.per_device_batch_size = s.train.per_device_batch_size;
    snap.grad_accum_steps = s.train.grad_accum_steps;
    snap.sampler = train_sampler.state(train_loader.next_sample());
    if (precision.scaler()) snap.scaler = precision.scaler()->state();
    snap.rng = capture_rng(device);
    snap.settings = settings_to_json(s);
    snap.recipe_yaml = recipe_to_yaml(s);
    snap.optimizer = optimizer->describe();
    // On rank 0: every tp shard's weights and optimizer state (ZeRO: every dp rank's share merged).
    ParallelRun::CheckpointShards shards = par.gather_checkpoint(*optimizer);
    if (shards.model.size() > 1) {
      snap.model_shards = std::move(shards.model);
      snap.optimizer_shards = std::move(shards.optimizer);
      snap.tp_split = par.tensor_split();
    } else if (lead) {
      snap.model = std::move(shards.model.front());  // every pipeline stage's parameters
      snap.optimizer_state = std::move(shards.optimizer.front());
    }
    if (!lora_base.empty()) {  // model.lora.save: adapters
      snap.lora_base = lora_base;
      std::erase_if(snap.model, [](const NamedTensor& w) { return !is_lora_parameter(w.name); });
    }
    if (!lead) {
      last_saved_step = t.step;
      return;
    }
    const fs::path dir = save_training_checkpoint(ckpt_root, snap);
    prune_checkpoints(ckpt_root, s.checkpoint.keep_last);
    last_saved_step = t.step;
    last_save_s = seconds_since(t0);
    progress.finish();
    spdlog::info("checkpoint: step {} saved to {} in {:.2f} s", t.step, dir.string(), last_save_s);
  };

  auto run_eval = [&]() {
    double l = 0;
    auto evaluate = [&] { l = gputrain::evaluate(par, model, eval_batches, precision); };
    // A captured step graph lends its memory pool, idle between replays (train/step_graph.h).
    if (step_graph) step_graph->run_in_graph_memory(evaluate);
    else evaluate();
    if (!std::isfinite(l)) throw runtime_error("evaluation loss is not finite at step " + std::to_string(t.step));
    t.last_eval = l;
    progress.finish();
    spdlog::info("eval at step {}: loss {:.4f}{}", t.step, l,
                 floor ? fmt::format(" (floor {:.4f}, gap {:.4f})", *floor, l - *floor) : std::string());
    return l;
  };

  // checkpoint.max_wall_time: stop while one more step and a save still fit.
  // The estimate is the slowest step seen (eval and logging included) plus
  // the last save's duration (before the first save: a guess from its size).
  // Each process trains at least one step, so a requeued job always makes
  // progress and leaves a checkpoint to continue from.
  const double state_mb = static_cast<double>(optimizer->state_bytes()) / 1e6 + n_params * 4 / 1e6;
  double slowest_step_s = 0;
  auto out_of_time = [&]() {
    if (s.checkpoint.max_wall_time <= 0 || slowest_step_s == 0) return false;
    const double save_s = last_save_s > 0 ? last_save_s : 1.0 + state_mb / 200.0;
    return seconds_since(t_start) + 1.2 * (slowest_step_s + save_s) > s.checkpoint.max_wall_time;
  };

  std::string status = "ok";
  int stop_signal = 0;
  if (t.step >= s.train.max_steps)
    spdlog::info("resume: the checkpoint is at step {}, train.max_steps is {}: nothing to train", t.step,
                 s.train.max_steps);
  try {
    auto interval_start = Clock::now();
    int64_t interval_tokens = 0, interval_steps = 0;
    torch::Tensor interval_loss;  // summed on the device; read at log steps only
    int64_t consecutive_skips = 0;
    constexpr int64_t kMaxConsecutiveSkips = 50;
    while (t.step < s.train.max_steps) {
      // Rank 0's clock decides for all (an all-reduce only when a limit is set).
      if (s.checkpoint.max_wall_time > 0 && par.any_rank(lead && out_of_time(), "agreement on max_wall_time")) {
        t.stop_reason = "max_wall_time";
        status = "preempted";
        progress.finish();
        spdlog::warn("checkpoint.max_wall_time ({:.0f} s) is near after {:.0f} s: saving and stopping at step {}",
                     s.checkpoint.max_wall_time, seconds_since(t_start), t.step);
        break;
      }
      profiler.before_step(t.step + 1);
      const auto t0 = Clock::now();
      // Distributed runs draw each step's random numbers (dropout) from a seed made of (run.seed,
      // dp rank, step): replicas differ, the tp ranks of one replica agree (their activations
      // outside the split layers are the same tensors), and a resumed run needs no other rank's
      // generator state.
      if (par.distributed())
        torch::manual_seed(mix_seed(seed, static_cast<uint64_t>(par.dp_rank()), static_cast<uint64_t>(t.step)));
      std::vector<Batch> micro;
      int64_t local_tokens = 0;
      for (int64_t i = 0; i < s.train.grad_accum_steps; ++i) {
        micro.push_back(train_loader.next());
        local_tokens += micro.back().target_count;
      }
      const int64_t step_tokens = par.global_targets(local_tokens);
      const bool capture_now = step_graph && !step_graph->keeps_gradients();
      torch::Tensor loss = step_graph ? step_graph->accumulate(model, micro, precision, step_tokens)
                                      : forward_backward(par, model, micro, precision, step_tokens);
      if (capture_now && step_graph->keeps_gradients()) {
        progress.finish();
        spdlog::info("kernels.cuda_graphs: step {} captured ({} micro-batches); replayed from here on", t.step + 1,
                     micro.size());
      }
      par.finish_backward();  // every rank now holds the summed gradients (ZeRO-2: of its own parameters)
      // The global batch's mean loss; and a stop signal on any rank stops every rank after this step
      // (a signal may reach them a step apart; one arriving later in this step counts at the next).
      const auto [global_loss, agreed_stop] = par.sum_loss_and_any(loss, StopSignals::requested() != 0);
      loss = global_loss;
      bool overflow = precision.unscale_and_check(params);  // fp16: inf/nan gradients
      if (precision.has_scaler()) overflow = par.overflow_on_any_rank(overflow);
      // Fused AdamW multiplies the gradients by the clipping coefficient as it reads them, which saves
      // a pass over every gradient (not under offload: its update runs on host copies).
      torch::Tensor clip_coef;
      const bool fold_clip = optimizer->folds_grad_scale() && !offload;
      torch::Tensor grad_norm = par.clip_grad_norm(s.train.max_grad_norm, fold_clip ? &clip_coef : nullptr);
      optimizer->set_grad_scale(clip_coef);
      const double lr = schedule.at(t.step);
      const int64_t step = t.step + 1;
      bool nan_skip = false;
      if (!overflow && !step_is_finite(loss, grad_norm)) {
        const std::string message = non_finite_message(step, loss.item<double>(), grad_norm.item<double>(),
                                                       first_non_finite(named_params), s.train.nan_policy);
        if (s.train.nan_policy == NanPolicy::kAbort) throw runtime_error(message);
        progress.finish();
        spdlog::warn("{}", message);
        nan_skip = s.train.nan_policy == NanPolicy::kSkip;
        t.nan_skipped_steps += nan_skip ? 1 : 0;
      }
      if (!overflow && !nan_skip) {
        if (offload) offload->gradients_to_host();
        optimizer->step(lr);
        if (offload) offload->parameters_to_device();
        par.after_optimizer_step();  // ZeRO: owners send their updated parameters
      }
      precision.update(overflow);
      // Every parameter's, not just the optimizer's (under ZeRO it holds a share of them).
      // A captured step graph keeps them: they are its outputs, overwritten by the next replay.
      if (!step_graph || !step_graph->keeps_gradients())
        for (const auto& p : params) p.mutable_grad() = torch::Tensor();
      t.step = step;
      if (overflow)
        spdlog::warn("step {}: gradients overflowed under fp16; optimizer step skipped, loss scale now {}", step,
                     precision.loss_scale());
      if (overflow || nan_skip) {
        // Backing off cannot help when the forward pass itself overflows fp16.
        if (++consecutive_skips >= kMaxConsecutiveSkips)
          throw runtime_error(std::to_string(consecutive_skips) + " steps in a row were skipped (" +
                              (overflow ? "fp16 overflow, down to loss scale " + std::to_string(precision.loss_scale())
                                        : std::string("non-finite loss or gradients")) +
                              ")\n    fix: use precision.mode: bf16 (fp32's range), lower optim.lr, or check the "
                              "initial weights (model.init_from)");
      } else {
        consecutive_skips = 0;
      }
      if (s.train.empty_cache_steps > 0 && step % s.train.empty_cache_steps == 0) release_cached_memory(device);
      t.tokens += step_tokens;
      interval_tokens += step_tokens;
      ++interval_steps;
      interval_loss = interval_loss.defined() ? interval_loss + loss : loss;
      t.train_seconds += seconds_since(t0);
      profiler.after_step(step);

      const bool eval_now = !eval_batches.empty() &&
                            ((s.train.eval_every > 0 && step % s.train.eval_every == 0) || step == s.train.max_steps);
      // One process looks at its signals as late as it can; ranks use the flag they agreed on.
      const bool stop_now = par.distributed() ? agreed_stop : StopSignals::requested() != 0;
      if (step % s.train.log_every == 0 || eval_now || step == s.train.max_steps || stop_now) {
        synchronize(device);
        const double elapsed = seconds_since(interval_start);
        const double loss_now = loss.item<double>();
        const double mean_loss = interval_loss.item<double>() / static_cast<double>(interval_steps);
        const double norm = grad_norm.item<double>();
        t.last_loss = loss_now;
        json rec;
        rec["step"] = step;
        rec["loss"] = round_to(loss_now, 6);  // null when not finite (a skipped or warned step)
        rec["loss_avg"] = round_to(mean_loss, 6);  // mean over the steps since the last line
        rec["lr"] = lr;
        rec["grad_norm"] = round_to(norm, 6);
        rec["tokens"] = t.tokens;
        rec["tokens_per_s"] = round_to(static_cast<double>(interval_tokens) / elapsed, 1);
        rec["step_ms"] = round_to(1000.0 * elapsed / static_cast<double>(interval_steps), 3);
        if (auto mfu = model_flops_utilization(rec["tokens_per_s"].get<double>(), flops_per_token, world.size,
                                               device_label))
          rec["mfu"] = round_to(*mfu, 4);
        rec["mem_peak_mb"] = round_to(peak_memory_mb(device), 1);
        if (precision.has_scaler()) {
          rec["loss_scale"] = precision.loss_scale();
          rec["skipped_steps"] = precision.skipped_steps();  // since the start of the run
        }
        if (t.nan_skipped_steps > 0) rec["nan_skipped_steps"] = t.nan_skipped_steps;
        moe_metrics.add_to(rec, model, par);  // model.moe: balancing loss, dropped tokens (a collective)
        if (eval_now) rec["eval_loss"] = round_to(run_eval(), 6);
        if (metrics) metrics->write(rec);
        progress.update(step, loss_now, static_cast<double>(interval_tokens) / elapsed, lr,
                        elapsed / static_cast<double>(interval_steps));
        interval_start = Clock::now();
        interval_tokens = interval_steps = 0;
        interval_loss = torch::Tensor();
      }
      if (stop_now) {
        stop_signal = StopSignals::requested() != 0 ? StopSignals::requested() : SIGTERM;  // SIGTERM: a peer's
        status = StopSignals::requested() == 0 || StopSignals::preempted() ? "preempted" : "interrupted";
        t.stop_reason = signal_name(stop_signal);
        break;
      }
      slowest_step_s = std::max(slowest_step_s, seconds_since(t0));
      if (s.checkpoint.every > 0 && step % s.checkpoint.every == 0) save_checkpoint();
    }
    // A stopped run always saves (that is the point of stopping gracefully); a finished one if asked.
    if (status != "ok" || s.checkpoint.at_end) save_checkpoint();
  } catch (const std::exception& e) {
    progress.finish();
    json failed = summary_for("failed");
    failed["error"] = e.what();
    if (lead) write_file_atomic((out_dir / "summary.json").string(), failed.dump(2) + "\n");
    throw;
  }
  progress.finish();

  json summary = summary_for(status);
  summary["memory_per_rank"] = par.memory_per_rank(*optimizer);  // a collective: every rank gets here
  if (par.distributed()) summary["grad_sync"] = par.grad_sync_report();
  if (lead) write_file_atomic((out_dir / "summary.json").string(), summary.dump(2) + "\n");
  spdlog::info("{}: {} steps, {} tokens in {}, {:.0f} tokens/s; final loss {:.4f}{}", status, t.step, t.tokens,
               format_duration(seconds_since(t_start)), summary["tokens_per_s"].get<double>(), t.last_loss,
               t.last_eval ? fmt::format(", eval loss {:.4f}", *t.last_eval) : std::string());
  return RunOutcome{status, stop_signal, summary};
}

}  // namespace gputrain
