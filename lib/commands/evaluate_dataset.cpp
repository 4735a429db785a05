#include "commands/evaluate_dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "checkpoint/inference_model.h"
#include "checkpoint/model_tokenizer.h"
#include "parallel/process_groups.h"
#include "parallel/replica_sums.h"
#include "parallel/world.h"
#include "train/full_evaluation.h"
#include "objective/objectives.h"
#include "train/forward_backward.h"
#include "train/reference_model.h"
#include "util/atomic_file.h"
#include "util/device.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace gputrain {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

DataSourceSettings data_source(const EvalCommandOptions& o, const Settings& saved) {
  if (o.data.empty()) {
    if (saved.data.eval.format == DataFormat::kNone)
      throw usage_error("'" + o.where +
                        "' has no data.eval in its recipe\n    fix: pass --data PATH (a text file or "
                        "token shards)");
    return saved.data.eval;
  }
  DataSourceSettings d;
  d.paths = {o.data};
  if (o.format == "preference" || (o.format == "auto" && o.data.ends_with("_pairs.bin"))) {
    d.format = DataFormat::kPreference;
    return d;
  }
  const bool shards = o.format == "tokens" || (o.format == "auto" && o.data.ends_with(".bin"));
  d.format = shards ? DataFormat::kTokens : DataFormat::kText;
  // Token shards are read as the run read its own: packing, boundary masking and document attention.
  const DataSourceSettings& run = saved.data.eval.format == DataFormat::kTokens ? saved.data.eval : saved.data.train;
  if (shards && run.format == DataFormat::kTokens) {
    d.packing = run.packing;
    d.mask_document_boundaries = run.mask_document_boundaries;
    d.document_attention = run.document_attention;
    d.eot_token = run.eot_token;
  }
  return d;
}

// The run folder a result belongs in: `where` itself, or the run holding the checkpoint (none for
// a Hugging Face folder).
std::optional<fs::path> run_folder(const fs::path& where, const InferenceModel& m) {
  if (m.hf_folder) return std::nullopt;
  for (const fs::path& p : {where, m.source.parent_path().parent_path()})
    if (fs::exists(p / "metrics.jsonl")) return p;
  return std::nullopt;
}

// Pairs train only a preference objective, and windows of text only a next-token one.
void check_objective_data(const ObjectiveSpec& objective, const DataSourceSettings& d) {
  const bool pairs = d.format == DataFormat::kPreference;
  const bool reads_pairs = objective.reads(BatchField::kPairs);
  if (pairs != reads_pairs)
    throw usage_error(
        "the model was trained with train.objective: " + objective_name(objective.name) + ", and " +
        (pairs ? "--data holds preference pairs" : "the data is not preference pairs") + "\n    fix: evaluate " +
        (pairs ? "a preference-trained run on pairs" : "on pairs (--data ...train_pairs.bin / val_pairs.bin)") +
        ", the objective it trained with");
}

std::unique_ptr<Tokenizer> tokenizer_for_bytes(const InferenceModel& m, const TokenizerSpec& chosen) {
  try {
    return model_tokenizer(m, chosen);
  } catch (const Error& e) {
    spdlog::warn("no bits per byte: {}", e.what());
    return nullptr;
  }
}

}  // namespace

std::optional<json> evaluate_dataset(const EvalCommandOptions& o) {
  const World world = detect_world_from_environment();
  const torch::Device device = device_for_local_rank(resolve_device(o.device), world.local_rank);
  if (world.rank != 0) spdlog::set_level(spdlog::level::warn);
  const ProcessGroups groups(world, ParallelSettings{}, device);  // every process a data-parallel replica
  InferenceModel m = load_inference_model(o.where, device, o.quantize);
  const DataSourceSettings d = data_source(o, m.settings);
  const std::unique_ptr<WindowSource> source =
      make_window_source(d, m.settings.model, o.data.empty() ? "data.eval" : "--data");
  if (source->window_count() == 0)
    throw usage_error(
        "synthetic data has no end to evaluate to\n    fix: pass --data with a text file or token shards");
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_for_bytes(m, o.tokenizer);
  const int64_t batch = o.batch_size > 0 ? o.batch_size : std::max<int64_t>(1, m.settings.train.per_device_batch_size);
  spdlog::info("eval: {} (step {}) on {}: {} windows of {} tokens{}", m.source.string(), m.step, source->describe(),
               source->window_count(), m.settings.model.seq_len,
               world.size > 1 ? fmt::format(", {} processes", world.size) : "");

  // The training step's evaluation, of the model's objective, in fp32 or under bf16 autocast (each
  // process a whole model; the loss's sums stay fp32).
  PrecisionSettings compute;
  compute.mode = o.bf16 ? PrecisionMode::kBf16 : PrecisionMode::kFp32;
  const Precision precision(compute, device);
  const ObjectiveSpec objective = configured_objective(m.settings.train);
  check_objective_data(objective, d);
  ForwardBackward passes(groups, nullptr, nullptr, m.model, precision, objective, nullptr);
  // DPO's reference: the starting weights (the model is loaded with any LoRA merged, so the base is
  // rebuilt from model.init_from as a frozen copy, its adapters at their zero start; QLoRA's block
  // Linears in 4 bits, as training saw them), whole on each process.
  Settings reference_settings = m.settings;
  reference_settings.train.preference.reference = PreferenceReference::kModel;
  reference_settings.model.quantize = m.trained_quantize;
  reference_settings.parallel = {};
  ParallelizeOptions whole;  // every process its whole copy
  whole.device = device;
  const std::unique_ptr<ReferenceModel> reference =
      ReferenceModel::make(objective, reference_settings, m.model, precision, groups, whole);
  if (reference) passes.set_batch_preparation([&](std::vector<Batch>& b) { reference->fill(b); });
  const auto start = SteadyClock::now();
  EvalTotals t = evaluate_windows(
      *source, m.settings.model.seq_len, batch, document_options(d), device, WindowShare{world.rank, world.size},
      tokenizer.get(), [&](const Batch& b) { return passes.loss_sum(b); }, objective.units);
  torch::Tensor metric_sums = torch::tensor(passes.take_eval_metric_sums(), torch::kDouble);
  if (groups.distributed()) {
    t.loss_sum =
        sum_loss_and_any(groups, torch::tensor(t.loss_sum, torch::kDouble).to(device), false).first.item<double>();
    const std::vector<int64_t> c =
        global_counts(groups, {t.targets, t.windows, std::max<int64_t>(t.bytes, 0), t.units});
    t.targets = c[0];
    t.windows = c[1];
    if (t.bytes >= 0) t.bytes = c[2];
    t.units = c[3];
    if (metric_sums.numel() > 0) metric_sums = global_sums(groups, metric_sums.to(device)).cpu();
  }
  const double seconds = seconds_since(start);
  json j = {{"source", m.source.string()},
            {"step", m.step},
            {"precision", o.bf16 ? "bf16" : "fp32"},
            {"data", o.data.empty() ? "data.eval" : o.data},
            {"windows", t.windows},
            {"seq_len", m.settings.model.seq_len},
            {"tokens", t.targets},
            {"loss", t.loss()},
            {"perplexity", t.perplexity()},
            {"bits_per_byte", t.bits_per_byte() ? json(*t.bits_per_byte()) : json(nullptr)},
            {"bytes", t.bytes >= 0 ? json(t.bytes) : json(nullptr)},
            {"tokenizer", tokenizer ? json(tokenizer->name()) : json(nullptr)},
            {"world_size", world.size},
            {"seconds", seconds},
            {"tokens_per_s", seconds > 0 ? static_cast<double>(t.targets) / seconds : 0.0}};
  // The objective's own metrics over the whole set (preference: the pairs' reward accuracy and margins).
  for (int64_t i = 0; i < metric_sums.numel(); ++i)
    j[objective.metric_names[static_cast<size_t>(i)]] =
        metric_sums[i].item<double>() / static_cast<double>(std::max<int64_t>(t.units, 1));
  if (d.format == DataFormat::kPreference) {  // a loss over pairs has no perplexity or bits per byte
    j["pairs"] = t.units;
    for (const char* key : {"perplexity", "bits_per_byte", "bytes"}) j[key] = nullptr;
  }
  if (world.rank != 0) return std::nullopt;
  if (!o.out.empty()) write_file_atomic(o.out, j.dump(2) + "\n");
  if (const auto run = run_folder(o.where, m)) {
    const fs::path file = *run / "eval.jsonl";
    if (std::FILE* f = std::fopen(file.c_str(), "a")) {
      const std::string line = j.dump() + "\n";
      std::fwrite(line.data(), 1, line.size(), f);
      std::fclose(f);
      spdlog::info("eval: appended to {}", file.string());
    } else {
      throw runtime_error("cannot append to '" + file.string() + "'");
    }
  }
  return j;
}

}  // namespace gputrain
