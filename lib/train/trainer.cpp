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

#include "config/schema.h"
#include "data/loader.h"
#include "metrics/metrics_writer.h"
#include "metrics/progress.h"
#include "model/activation_checkpointing.h"
#include "model/gpt.h"
#include "optim/make_optimizer.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "precision/precision.h"
#include "train/batch_finder.h"
#include "train/train_step.h"
#include "util/cpu_memory.h"
#include "util/device.h"
#include "util/error.h"
#include "util/signals.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

fs::path prepare_output_dir(const Settings& s, const RunOptions& o) {
  fs::path dir = s.resolved_output_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw runtime_error("cannot create output directory '" + dir.string() + "': " + ec.message());
  if (!o.overwrite && (fs::exists(dir / "metrics.jsonl") || fs::exists(dir / "summary.json")))
    throw usage_error("output directory '" + dir.string() + "' already holds a run (metrics.jsonl)" +
                      "\n    fix: choose another with --output-dir, or pass --overwrite to replace it");
  return dir;
}

double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

Gpt build_model(const Settings& s, torch::Device device, const Precision& precision) {
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));
  Gpt model(s.model);  // initialized in fp32, then cast: bf16-pure starts from the same weights rounded
  model->to(device, precision.weight_dtype());
  model->train();
  return model;
}

// What the loop has done so far; the summary is built from it on every exit path.
struct Totals {
  int64_t step = 0;
  int64_t tokens = 0;
  double train_seconds = 0;  // time inside training steps (no eval, no logging)
  double last_loss = NAN;
  std::optional<double> last_eval;
  double mem_start_mb = 0;  // CPU: resident memory before the model was built (LibTorch, data maps)
};

// summary.json (the metrics contract) for a run that ended with `status`.
json build_summary(const std::string& status, const Totals& t, const Settings& s, const torch::Device& device,
                   int64_t threads, int64_t n_params, const Optimizer& optimizer, int64_t skipped_steps,
                   std::optional<double> floor, double wall_s) {
  json j;
  j["status"] = status;
  j["steps"] = t.step;
  j["max_steps"] = s.train.max_steps;
  j["tokens"] = t.tokens;
  j["wall_s"] = round_to(wall_s, 3);
  j["train_s"] = round_to(t.train_seconds, 3);
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

}  // namespace

RunOutcome run_training(const Recipe& recipe, const RunOptions& options) {
  Settings s = recipe.settings;  // a copy: batch size auto fills in the chosen split
  const auto t_start = Clock::now();

  const int64_t threads = resolve_threads(s.run.threads);
  at::set_num_threads(static_cast<int>(threads));
  const torch::Device device = resolve_device(s.run.device);
  if (device.is_cpu() && s.run.cpu_malloc_cache) keep_freed_cpu_memory_for_reuse();
  // Data first: a bad data file stops the run before anything is written.
  const auto seed = static_cast<uint64_t>(s.run.seed);
  auto train_source = make_window_source(s.data.train, s.model, "data.train");
  std::unique_ptr<WindowSource> eval_source;
  if (s.data.eval.format != DataFormat::kNone) eval_source = make_window_source(s.data.eval, s.model, "data.eval");
  const fs::path out_dir = prepare_output_dir(s, options);
  write_file_atomic((out_dir / "recipe.resolved.yaml").string(), recipe_to_yaml(s));

  Totals t;
  t.mem_start_mb = current_rss_mb();
  Precision precision(s.precision, device);
  Gpt model = build_model(s, device, precision);
  const int64_t recomputed_blocks =
      apply_activation_checkpointing(model, s.train.gradient_checkpointing, s.train.checkpoint_every);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(*model, s.optim);
  LrSchedule schedule(s.optim, s.train.max_steps);
  const std::vector<torch::Tensor> params = model->parameters();
  if (s.train.per_device_batch_size == 0) {
    const double budget = cpu_memory_budget_bytes(s);
    const BatchChoice choice =
        device.is_cpu() ? find_batch_size_cpu(s, budget)
                        : find_batch_size(s.train.global_batch_size, [&](int64_t b) {
                            return fits_on_device(model, precision, s.model, b, device);
                          });
    choice.apply_to(s.train);
    spdlog::info("{}{}", choice.describe(),
                 device.is_cpu() ? fmt::format(" (CPU: memory plan against {:.0f} MiB)", budget / (1024.0 * 1024.0))
                                 : std::string(" (trial steps on the GPU)"));
  }

  std::vector<Batch> eval_batches;
  if (eval_source) {
    WindowSampler eval_sampler(eval_source->window_count(), SamplerOptions{seed, kEvalStream});
    BatchLoader eval_loader(*eval_source, eval_sampler, loader_options(s, s.data.eval, device, 0));
    for (int64_t i = 0; i < s.train.eval_steps; ++i) eval_batches.push_back(eval_loader.next());
  }
  WindowSampler train_sampler(train_source->window_count(), SamplerOptions{seed, kTrainStream});
  BatchLoader train_loader(*train_source, train_sampler, loader_options(s, s.data.train, device, s.data.num_workers));

  const std::optional<double> floor = train_source->entropy_floor(s.model.seq_len);
  const int64_t n_params = model->parameter_count();
  spdlog::info("gputrain: {} on {} ({} threads), recipe {}", s.run.name, device_name(device), threads, recipe.source);
  spdlog::info("model: GPT {} layers, d_model {}, {} heads, seq_len {}, vocab {}: {:.2f}M parameters", s.model.n_layer,
               s.model.d_model, s.model.n_head, s.model.seq_len, s.model.vocab_size, n_params / 1e6);
  spdlog::info("precision: {}", precision.describe());
  spdlog::info("optimizer: {}; {:.1f} MiB of state ({:.2f} bytes per parameter)", optimizer->describe(),
               optimizer->state_bytes() / (1024.0 * 1024.0),
               static_cast<double>(optimizer->state_bytes()) / static_cast<double>(model->parameter_count()));
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
  spdlog::info("train: {} steps x {} tokens (grad_accum {} x batch {} x seq_len {}); output in {}", s.train.max_steps,
               s.tokens_per_step(), s.train.grad_accum_steps, s.train.per_device_batch_size, s.model.seq_len,
               out_dir.string());
  for (const auto& w : recipe.warnings) spdlog::warn("{}", w.str());

  MetricsWriter metrics((out_dir / "metrics.jsonl").string());
  Progress progress(s.metrics.progress, s.train.max_steps);
  StopSignals signals;
  reset_peak_memory(device);

  auto summary_for = [&](const std::string& status) {
    return build_summary(status, t, s, device, threads, n_params, *optimizer, precision.skipped_steps(),
                         floor, seconds_since(t_start));
  };

  auto run_eval = [&]() {
    const double l = evaluate(model, eval_batches, &precision);
    if (!std::isfinite(l)) throw runtime_error("evaluation loss is not finite at step " + std::to_string(t.step));
    t.last_eval = l;
    progress.finish();
    spdlog::info("eval at step {}: loss {:.4f}{}", t.step, l,
                 floor ? fmt::format(" (floor {:.4f}, gap {:.4f})", *floor, l - *floor) : std::string());
    return l;
  };

  std::string status = "ok";
  int stop_signal = 0;
  try {
    auto interval_start = Clock::now();
    int64_t interval_tokens = 0, interval_steps = 0;
    torch::Tensor interval_loss;  // summed on the device; read at log steps only
    int64_t consecutive_skips = 0;
    constexpr int64_t kMaxConsecutiveSkips = 50;
    while (t.step < s.train.max_steps) {
      const auto t0 = Clock::now();
      std::vector<Batch> micro;
      int64_t step_tokens = 0;
      for (int64_t i = 0; i < s.train.grad_accum_steps; ++i) {
        micro.push_back(train_loader.next());
        step_tokens += micro.back().target_count;
      }
      torch::Tensor loss = accumulate_gradients(model, micro, &precision);
      const bool skip = precision.unscale_and_check(params);  // fp16: inf/nan gradients
      torch::Tensor grad_norm = clip_grad_norm(params, s.train.max_grad_norm);
      const double lr = schedule.at(t.step);
      if (!skip) optimizer->step(lr);
      precision.update(skip);
      optimizer->zero_grad();
      const int64_t step = ++t.step;
      if (skip) {
        spdlog::warn("step {}: gradients overflowed under fp16; optimizer step skipped, loss scale now {}", step,
                     precision.loss_scale());
        // Backing off cannot help when the forward pass itself overflows fp16.
        if (++consecutive_skips >= kMaxConsecutiveSkips)
          throw runtime_error("fp16: " + std::to_string(consecutive_skips) +
                              " steps in a row had inf/nan gradients, down to loss scale " +
                              std::to_string(precision.loss_scale()) +
                              "\n    fix: use precision.mode: bf16 (fp32's range), or lower optim.lr");
      } else {
        consecutive_skips = 0;
      }
      if (s.train.empty_cache_steps > 0 && step % s.train.empty_cache_steps == 0) release_cached_memory(device);
      t.tokens += step_tokens;
      interval_tokens += step_tokens;
      ++interval_steps;
      interval_loss = interval_loss.defined() ? interval_loss + loss : loss;
      t.train_seconds += seconds_since(t0);

      const bool eval_now = !eval_batches.empty() &&
                            ((s.train.eval_every > 0 && step % s.train.eval_every == 0) || step == s.train.max_steps);
      const bool stop_now = StopSignals::requested() != 0;
      if (step % s.train.log_every == 0 || eval_now || step == s.train.max_steps || stop_now) {
        synchronize(device);
        const double elapsed = seconds_since(interval_start);
        const double loss_now = loss.item<double>();
        const double mean_loss = interval_loss.item<double>() / static_cast<double>(interval_steps);
        const double norm = grad_norm.item<double>();
        // A step fp16 skipped may show a non-finite loss; it changed nothing.
        if (!skip && !std::isfinite(loss_now))
          throw runtime_error("training loss became non-finite (" + std::to_string(loss_now) + ") by step " +
                              std::to_string(step) + "\n    fix: lower optim.lr, raise optim.schedule.warmup_steps, "
                              "or set train.max_grad_norm");
        t.last_loss = loss_now;
        json rec;
        rec["step"] = step;
        rec["loss"] = round_to(loss_now, 6);
        rec["loss_avg"] = round_to(mean_loss, 6);  // mean over the steps since the last line
        rec["lr"] = lr;
        rec["grad_norm"] = round_to(norm, 6);
        rec["tokens"] = t.tokens;
        rec["tokens_per_s"] = round_to(static_cast<double>(interval_tokens) / elapsed, 1);
        rec["step_ms"] = round_to(1000.0 * elapsed / static_cast<double>(interval_steps), 3);
        rec["mem_peak_mb"] = round_to(peak_memory_mb(device), 1);
        if (precision.has_scaler()) {
          rec["loss_scale"] = precision.loss_scale();
          rec["skipped_steps"] = precision.skipped_steps();  // since the start of the run
        }
        if (eval_now) rec["eval_loss"] = round_to(run_eval(), 6);
        metrics.write(rec);
        progress.update(step, loss_now, static_cast<double>(interval_tokens) / elapsed, lr,
                        elapsed / static_cast<double>(interval_steps));
        interval_start = Clock::now();
        interval_tokens = interval_steps = 0;
        interval_loss = torch::Tensor();
      }
      if (stop_now) {
        stop_signal = StopSignals::requested();
        status = stop_signal == SIGTERM ? "preempted" : "interrupted";
        break;
      }
    }
  } catch (const std::exception& e) {
    progress.finish();
    json failed = summary_for("failed");
    failed["error"] = e.what();
    write_file_atomic((out_dir / "summary.json").string(), failed.dump(2) + "\n");
    throw;
  }
  progress.finish();

  json summary = summary_for(status);
  write_file_atomic((out_dir / "summary.json").string(), summary.dump(2) + "\n");
  spdlog::info("{}: {} steps, {} tokens in {}, {:.0f} tokens/s; final loss {:.4f}{}", status, t.step, t.tokens,
               format_duration(seconds_since(t_start)), summary["tokens_per_s"].get<double>(), t.last_loss,
               t.last_eval ? fmt::format(", eval loss {:.4f}", *t.last_eval) : std::string());
  return RunOutcome{status, stop_signal, summary};
}

}  // namespace gputrain
