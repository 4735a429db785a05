#include "config/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include "config/schema.h"
#include "util/paths.h"
#include "util/sequence_chunks.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

struct Checker {
  const Settings& s;
  const std::map<std::string, Origin>& origins;
  const RecipeRules& rules;
  Diagnostics& diag;

  Origin at(const std::string& key) const {
    auto it = origins.find(key);
    return it == origins.end() ? Origin{"default"} : it->second;
  }
  void error(const std::string& key, std::string problem, std::string fix) {
    diag.error(at(key), key, std::move(problem), std::move(fix));
  }
  void warning(const std::string& key, std::string problem, std::string fix) {
    diag.warning(at(key), key, std::move(problem), std::move(fix));
  }
};

std::string str(int64_t v) { return std::to_string(v); }

void check_run(Checker& c) {
  static const std::regex device(R"(auto|cpu|cuda|cuda:\d+)");
  if (!std::regex_match(c.s.run.device, device))
    c.error("run.device", "'" + c.s.run.device + "' is not a device", "use auto, cpu, cuda or cuda:N");
  static const std::regex name(R"([A-Za-z0-9._-]+)");
  if (!std::regex_match(c.s.run.name, name))
    c.error("run.name", "'" + c.s.run.name + "' cannot be used in a directory name",
            "use letters, digits, '.', '_' and '-' only");
}

// QLoRA: the 4-bit base must be frozen, in a block size bitsandbytes has.
void check_quantize(Checker& c, const ModelSettings& m) {
  const QuantizeSettings& q = m.quantize;
  const int64_t b = q.block_size;
  if (b < 32 || b > 4096 || (b & (b - 1)) != 0)
    c.error("model.quantize.block_size", "(" + str(b) + ") is not a block size bitsandbytes quantizes with",
            "use 32, 64, 128, 256, 512, 1024, 2048 or 4096 (64 is bitsandbytes' and QLoRA's)");
  if (!q.enabled()) return;
  if (m.lora.rank == 0)
    c.error("model.quantize.base",
            "quantizes the frozen base in 4 bits, but without LoRA every weight trains, and a 4-bit weight cannot "
            "be updated",
            "set model.lora.rank (16, say) to train adapters on the 4-bit base, or model.quantize.base: none");
  else if (m.lora.save == LoraSave::kFull)
    c.error("model.lora.save", "full: checkpoints would hold the base, which model.quantize.base keeps in 4 bits only",
            "use model.lora.save: adapters (the base is model.init_from, quantized again on resume; `gputrain "
            "export --merge-lora` writes the merged model)");
}

void check_model(Checker& c) {
  const ModelSettings& m = c.s.model;
  if (m.d_model % m.n_head != 0 && m.head_dim == 0) {
    std::string divisors;
    for (int64_t h = 1; h <= m.d_model && divisors.size() < 40; ++h)
      if (m.d_model % h == 0 && h != m.n_head) divisors += (divisors.empty() ? "" : ", ") + str(h);
    c.error("model.n_head", "(" + str(m.n_head) + ") must divide model.d_model (" + str(m.d_model) + ")",
            "pick n_head among " + divisors + ", change d_model, or set model.head_dim (llama, qwen2, mistral)");
  }
  const std::vector<KeyProblem> architecture_problems = c.rules.model.check(m);
  for (const KeyProblem& p : architecture_problems) c.error(p.key, p.problem, p.fix);
  // A key the architecture refuses outright (GPT-2's n_kv_head) gets no further check here.
  const auto reported = [&](const std::string& key) {
    return std::any_of(architecture_problems.begin(), architecture_problems.end(),
                       [&](const KeyProblem& p) { return p.key == key; });
  };
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0 && !reported("model.n_kv_head"))
    c.error("model.n_kv_head",
            "(" + str(m.n_kv_head) + ") must divide model.n_head (" + str(m.n_head) +
                "): each key/value head serves the same number of query heads",
            "use a divisor of " + str(m.n_head) + " (1 = multi-query attention, n_head = plain multi-head)");
  if (m.lora.rank > m.d_model)
    c.error("model.lora.rank",
            "(" + str(m.lora.rank) + ") exceeds model.d_model (" + str(m.d_model) +
                "): a low-rank update needs rank < d_model",
            "use a rank such as 8 or 16");
  if (m.lora.rank > 0 && m.init_from.empty())
    c.warning("model.lora.rank",
              "LoRA freezes the base model, and without model.init_from the base is the seed's random initialization",
              "set model.init_from to the model to fine-tune");
  check_quantize(c, m);
  const MoeSettings& moe = m.moe;
  if (moe.enabled() && moe.top_k > moe.experts)
    c.error("model.moe.top_k", "(" + str(moe.top_k) + ") exceeds model.moe.experts (" + str(moe.experts) + ")",
            "route each token to at most " + str(moe.experts) + " experts");
  if (moe.enabled() && moe.every > m.n_layer)
    c.error("model.moe.every",
            "(" + str(moe.every) + ") exceeds model.n_layer (" + str(m.n_layer) + "): no block would be a mixture",
            "use at most " + str(m.n_layer));
  const MoeSettings defaults;
  if (moe.balance == MoeBalance::kBias && moe.aux_loss_coef != defaults.aux_loss_coef &&
      !c.at("model.moe.aux_loss_coef").is_default())
    c.warning("model.moe.aux_loss_coef", "has no effect with model.moe.balance: bias (no balancing loss is trained)",
              "remove it, or use model.moe.balance: aux_loss");
  if (moe.balance != MoeBalance::kBias && moe.bias_rate != defaults.bias_rate &&
      !c.at("model.moe.bias_rate").is_default())
    c.warning("model.moe.bias_rate", "has no effect without model.moe.balance: bias", "remove it");
  if (moe.enabled() && m.lora.rank > 0)
    for (LoraTarget t : m.lora.targets)
      if (t == LoraTarget::kMlpUp || t == LoraTarget::kMlpDown)
        c.error("model.lora.targets",
                "mlp_up and mlp_down cannot adapt mixture-of-experts layers (model.moe.experts > 0)",
                "adapt qkv and proj only");
}

// Plain paths are checked here, where the message can point at the recipe
// line; glob patterns, headers and sizes when the data is opened (data/token_dataset.h).
void check_paths(Checker& c, const std::vector<std::string>& paths, const std::string& key) {
  for (const auto& path : paths) {
    if (is_glob_pattern(path)) continue;
    std::error_code ec;
    if (fs::is_directory(path, ec))
      c.error(key, "'" + path + "' is a directory, not a data file",
              "name the files, e.g. " + (fs::path(path) / "train_*.bin").string());
    else if (!fs::is_regular_file(path, ec))
      c.error(key, "file '" + path + "' does not exist or is not a regular file",
              "check the path (relative paths are relative to the recipe file)");
  }
}

void check_source(Checker& c, const DataSourceSettings& d, const std::string& which) {
  const std::string p = "data." + which + ".";
  const ModelSettings& m = c.s.model;
  if (d.document_attention && (d.format == DataFormat::kText || d.format == DataFormat::kSynthetic))
    c.error(p + "document_attention",
            "needs token shards, whose document-start id (eot_token) says where each document begins, but format is " +
                std::string(d.format == DataFormat::kText ? "text" : "synthetic"),
            "prepare the data with `gputrain data prepare` and use format: tokens, or remove document_attention");
  if (!d.shared_prompt && d.format != DataFormat::kPreference)
    c.error(p + "shared_prompt", "applies to preference pairs, and format is not preference",
            "remove it, or use format: preference");
  if (d.pack_pairs && d.format != DataFormat::kPreference)
    c.error(p + "pack_pairs", "applies to preference pairs, and format is not preference",
            "remove it (text packs with data.*.packing), or use format: preference");
  switch (d.format) {
    case DataFormat::kNone:
      if (which == "train") c.error(p + "format", "is none, but training needs data", "use synthetic, tokens or text");
      return;
    case DataFormat::kSynthetic: {
      const SyntheticSettings& y = d.synthetic;
      int64_t vocab = y.vocab == 0 ? m.vocab_size : y.vocab;
      if (vocab > m.vocab_size)
        c.error(p + "synthetic.vocab", "(" + str(vocab) + ") exceeds model.vocab_size (" + str(m.vocab_size) + ")",
                "lower synthetic.vocab or raise model.vocab_size");
      if (y.kind == SyntheticKind::kMarkov) {
        double contexts = std::pow(static_cast<double>(vocab), static_cast<double>(y.order));
        if (contexts * static_cast<double>(std::min(y.branching, vocab)) > double(1 << 24))
          c.error(p + "synthetic.order",
                  "vocab^order x branching = " + std::to_string(contexts * y.branching) +
                      " transition entries is more than the 16M this generator keeps in memory",
                  "lower synthetic.vocab (e.g. 64), synthetic.order or synthetic.branching");
        if (y.branching > vocab)
          c.error(p + "synthetic.branching",
                  "(" + str(y.branching) + ") exceeds the language's vocabulary (" + str(vocab) + ")",
                  "use at most " + str(vocab));
      }
      return;
    }
    case DataFormat::kPreference:
      // (Its files are checked when opened, by `validate` and `run`: a recipe names pairs yet to be prepared.)
      if (d.paths.size() != 1)
        c.error(p + "path", "names " + str(static_cast<int64_t>(d.paths.size())) + " files for format preference",
                "name the one train_pairs.bin (or val_pairs.bin) `gputrain data prepare --format preference` wrote");
      if (!d.mixture.empty() || d.packing != Packing::kStream || d.document_attention || d.mask_document_boundaries)
        c.error(p + "format",
                "is preference: each row is a pair's chosen or rejected sequence, which mixture, packing, "
                "document_attention and mask_document_boundaries do not apply to",
                "remove those keys from " + p.substr(0, p.size() - 1));
      return;
    case DataFormat::kTokens:
    case DataFormat::kText:
      break;
  }
  if (d.span[0] >= d.span[1])
    c.error(p + "span",
            "start (" + std::to_string(d.span[0]) + ") must be below end (" + std::to_string(d.span[1]) + ")",
            "write [start, end) with start < end, e.g. [0.0, 0.9]");
  if (d.format == DataFormat::kText && m.vocab_size < 256)
    c.error("model.vocab_size",
            "(" + str(m.vocab_size) + ") is below 256, but data." + which + " is byte-level text (ids 0..255)",
            "set model.vocab_size to 256 or more");
  if (d.format == DataFormat::kText && (d.packing != Packing::kStream || d.mask_document_boundaries))
    c.error(p + "packing",
            "documents and boundary masking need token shards with end-of-document tokens, but format is text",
            "prepare the text with `gputrain data prepare --tokenizer bytes` and use format: tokens");
  if (d.eot_token >= m.vocab_size)
    c.error(p + "eot_token", "(" + str(d.eot_token) + ") is not below model.vocab_size (" + str(m.vocab_size) + ")",
            "use the tokenizer's end-of-document id (GPT-2: 50256), or auto");
  if (!d.mixture.empty()) {
    if (d.format != DataFormat::kTokens)
      c.error(p + "mixture", "needs format: tokens", "prepare each source with `gputrain data prepare`");
    if (!d.paths.empty())
      c.error(p + "path", "is set beside " + p + "mixture", "list every file under mixture, and remove path");
    for (size_t k = 0; k < d.mixture.size(); ++k) check_paths(c, d.mixture[k].paths, p + "mixture");
    return;
  }
  if (d.paths.empty()) {
    c.error(p + "path", "is required for format " + std::string(d.format == DataFormat::kText ? "text" : "tokens"),
            "set " + p + "path to the file (or a glob such as data/train_*.bin)");
    return;
  }
  check_paths(c, d.paths, p + "path");
}

void check_data(Checker& c) {
  check_source(c, c.s.data.train, "train");
  check_source(c, c.s.data.eval, "eval");
  const auto& tr = c.s.data.train;
  const auto& ev = c.s.data.eval;
  if (tr.format == ev.format && (tr.format == DataFormat::kText || tr.format == DataFormat::kTokens) &&
      tr.paths == ev.paths && tr.span[0] < ev.span[1] && ev.span[0] < tr.span[1])
    c.warning("data.eval.span", "evaluation reads the same part of the same files as training",
              "give train and eval disjoint spans, e.g. [0.0, 0.9] and [0.9, 1.0]");
  if (tr.format == DataFormat::kSynthetic && ev.format == DataFormat::kSynthetic &&
      (tr.synthetic.kind != ev.synthetic.kind || tr.synthetic.seed != ev.synthetic.seed ||
       tr.synthetic.order != ev.synthetic.order || tr.synthetic.vocab != ev.synthetic.vocab ||
       tr.synthetic.branching != ev.synthetic.branching))
    c.warning("data.eval.synthetic", "evaluation uses a different synthetic language than training",
              "give data.eval.synthetic the same settings as data.train.synthetic");
}

// Preference objectives train on pairs, and pairs feed nothing else.
void check_objective_data(Checker& c) {
  const bool pairs_wanted = c.s.train.objective != TrainObjective::kCausalLm;
  for (const char* which : {"train", "eval"}) {
    const DataSourceSettings& d = std::string(which) == "train" ? c.s.data.train : c.s.data.eval;
    if (d.format == DataFormat::kNone) continue;
    const bool pairs = d.format == DataFormat::kPreference;
    if (pairs_wanted && !pairs)
      c.error(std::string("data.") + which + ".format",
              "is not preference, but train.objective is a preference objective, which trains on pairs",
              "prepare pairs with `gputrain data prepare --format preference` and use format: preference");
    if (!pairs_wanted && pairs)
      c.error("train.objective", std::string("is causal_lm, but data.") + which + " holds preference pairs",
              "set train.objective: dpo, orpo or simpo (docs/preference.md)");
  }
}

void check_train(Checker& c) {
  const TrainSettings& t = c.s.train;
  check_objective_data(c);
  if (t.eval_every > 0 && c.s.data.eval.format == DataFormat::kNone)
    c.error("train.eval_every", "is " + str(t.eval_every) + " but data.eval is not set",
            "set data.eval (e.g. the same source with another span) or train.eval_every: 0");
  if (t.spike_policy == SpikePolicy::kRollback && c.s.checkpoint.every == 0)
    c.warning("train.spike_policy",
              "rollback needs checkpoints to go back to, and checkpoint.every is 0: spikes are skipped instead",
              "set checkpoint.every");
  if (t.eval_full && c.s.data.eval.format == DataFormat::kSynthetic)
    c.error("train.eval_full", "needs a dataset with an end, and data.eval is synthetic (endless)",
            "use text or token shards for data.eval, or train.eval_full: false (train.eval_steps batches)");
  if (t.eval_every > t.max_steps)
    c.warning("train.eval_every",
              "(" + str(t.eval_every) + ") exceeds train.max_steps (" + str(t.max_steps) +
                  "); only the final evaluation runs",
              "lower train.eval_every");
  const ScheduleSettings& sch = c.s.optim.schedule;
  int64_t decay_end = sch.decay_steps == 0 ? t.max_steps : sch.decay_steps;
  if (sch.warmup_steps > decay_end)
    c.error("optim.schedule.warmup_steps",
            "(" + str(sch.warmup_steps) + ") exceeds the decay end (" + str(decay_end) + ")",
            "use fewer warmup steps, or a larger train.max_steps / optim.schedule.decay_steps");
  const MetricsSettings& m = c.s.metrics;
  if (m.profile_at > 0 && m.profile_at + m.profile_steps - 1 > t.max_steps)
    c.error("metrics.profile_at",
            "profiles steps " + str(m.profile_at) + " to " + str(m.profile_at + m.profile_steps - 1) +
                ", past train.max_steps (" + str(t.max_steps) + ")",
            "profile earlier steps (a few after the first, which pays one-time costs), or fewer metrics.profile_steps");
}

void check_batch(Checker& c) {
  const TrainSettings& t = c.s.train;
  if (t.per_device_batch_size == 0 && t.global_batch_size == 0)
    c.error("train.per_device_batch_size", "is auto, which needs the global batch to keep",
            "set train.global_batch_size (sequences per optimizer step), e.g. 512");
  // The global batch counts every process. With parallel.dp auto their number is known only at run
  // time (the trainer checks then), so here it must at least be a whole number of processes.
  const int64_t dp = c.s.parallel.dp;
  const int64_t per_process = t.per_device_batch_size * t.grad_accum_steps;
  if (t.per_device_batch_size > 0 && t.global_batch_size > 0) {
    if (dp > 0 && t.global_batch_size != per_process * dp)
      c.error("train.global_batch_size",
              "(" + str(t.global_batch_size) + ") is not per_device_batch_size x grad_accum_steps" +
                  (dp > 1 ? " x parallel.dp (" : " (") + str(per_process * dp) + ")",
              "remove it, or set per_device_batch_size: auto to let the finder choose the split");
    if (dp == 0 && t.global_batch_size % per_process != 0)
      c.error("train.global_batch_size",
              "(" + str(t.global_batch_size) + ") is not per_device_batch_size x grad_accum_steps (" +
                  str(per_process) + ") x a number of processes",
              "remove it, or set per_device_batch_size: auto to let the finder choose the split");
  }
  if (t.gradient_checkpointing == CheckpointingPolicy::kSelective && t.checkpoint_every > c.s.model.n_layer)
    c.warning("train.checkpoint_every",
              "(" + str(t.checkpoint_every) + ") exceeds model.n_layer (" + str(c.s.model.n_layer) +
                  "); only block 0 is recomputed",
              "lower train.checkpoint_every");
}

// Tensor cores (and vectorized CPU kernels) want dimensions that are multiples
// of 8, ideally 64 on A100/H100; odd sizes run, only slower.
void check_alignment(Checker& c) {
  const ModelSettings& m = c.s.model;
  if (m.d_model % 8 != 0)
    c.warning("model.d_model",
              "(" + str(m.d_model) + ") is not a multiple of 8, which tensor cores need to run at speed",
              "use a multiple of 64 on A100/H100");
  if (m.head_width() % 8 != 0)
    c.warning("model.n_head",
              "gives a head dimension of " + str(m.head_width()) +
                  ", not a multiple of 8 (flash attention and tensor cores want one)",
              "choose n_head so that d_model / n_head is a multiple of 8 (64 is typical)");
  if (m.padded_vocab() % 8 != 0)
    c.warning("model.vocab_size",
              "(" + str(m.padded_vocab()) +
                  " embedding rows) is not a multiple of 8, so the output layer misses tensor cores",
              "set model.pad_vocab_to_multiple_of: 64 (GPT-2's 50257 becomes 50304)");
}

// Settings of one optimizer (objective) have no effect on another (said, not ignored silently), and
// each one's own rules: from the optimizers' files (optim/optimizer_spec.h) and the objectives' (objective/).
void check_optim(Checker& c) {
  const Settings defaults;
  const auto changed = [&](const std::string& key) {
    const FieldSpec* f = find_field(key);
    return f && !c.at(key).is_default() && f->write(c.s) != f->write(defaults);
  };
  for (const OptimizerProblem& p : c.rules.optimizer.check(c.s.optim, changed))
    p.error ? c.error(p.key, p.problem, p.fix) : c.warning(p.key, p.problem, p.fix);
  for (const OptimizerProblem& p : c.rules.objective.check(c.s, changed))
    p.error ? c.error(p.key, p.problem, p.fix) : c.warning(p.key, p.problem, p.fix);
}

void check_checkpoint(Checker& c) {
  const CheckpointSettings& k = c.s.checkpoint;
  if (k.resume != "auto" && k.resume != "never") {
    std::error_code ec;
    if (!fs::is_directory(k.resume, ec))
      c.error("checkpoint.resume", "'" + k.resume + "' is not a directory",
              "name a checkpoint directory (e.g. runs/NAME/checkpoints/step_00001000), or use auto or never");
  }
  if (!c.s.model.init_from.empty() && !fs::exists(c.s.model.init_from))
    c.error("model.init_from", "'" + c.s.model.init_from + "' does not exist",
            "name a Hugging Face model directory, a .safetensors file or a gputrain checkpoint directory "
            "(relative paths are relative to the recipe file)");
  if (k.every > c.s.train.max_steps)
    c.warning("checkpoint.every",
              "(" + str(k.every) + ") exceeds train.max_steps (" + str(c.s.train.max_steps) +
                  "); no periodic checkpoint is written",
              "lower checkpoint.every");
}

// parallel.zero 3 shards every weight over the dp group (each tp rank's shard, under tensor
// parallelism); expert parallelism (experts held in another form) is not combined with it yet, nor
// 8-bit AdamW, whose quantization blocks would straddle the rows of two ranks (Adafactor sums its
// statistics over the ranks' rows). Its offload is parallel.offload_params.
void check_fully_sharded(Checker& c) {
  const ParallelSettings& p = c.s.parallel;
  if (p.zero != 3) {
    if (!p.reshard_after_forward)
      c.warning("parallel.reshard_after_forward", "has no effect without parallel.zero: 3", "remove it");
    if (p.gather_dtype == GatherDtype::kBf16)
      c.warning("parallel.gather_dtype", "has no effect without parallel.zero: 3", "remove it");
    if (p.offload_params)
      c.error("parallel.offload_params",
              "offloads the weight shards of parallel.zero: 3, and parallel.zero is " + str(p.zero),
              "set parallel.zero: 3 with it, or use parallel.offload_optimizer: cpu (the optimizer state alone)");
    if (p.offload_optimizer == OptimizerOffload::kNvme)
      c.error("parallel.offload_optimizer",
              "nvme streams the optimizer state of parallel.zero: 3's units through files, and parallel.zero is " +
                  str(p.zero),
              "set parallel.zero: 3 with it, or use parallel.offload_optimizer: cpu");
    return;
  }
  if (p.offload_params && c.s.run.device == "cpu")
    c.warning("parallel.offload_params", "has no effect when training on the CPU (the shards are there already)",
              "remove it");
  if (p.gather_dtype == GatherDtype::kBf16 && c.s.precision.mode != PrecisionMode::kBf16 &&
      c.s.precision.mode != PrecisionMode::kBf16Pure)
    c.error("parallel.gather_dtype",
            "bf16 computes each gathered unit in bf16, which needs bf16 autocast around it (precision.mode: bf16)",
            "use precision.mode: bf16 with it, or parallel.gather_dtype: auto");
  if (p.offload_optimizer == OptimizerOffload::kCpu)
    c.error("parallel.offload_optimizer",
            "cpu offloads whole parameters' optimizer state, and parallel.zero: 3 keeps it sharded with the weights",
            "use parallel.offload_params: true with parallel.zero: 3 (shards, gradients and optimizer state in "
            "host memory), or parallel.offload_optimizer: nvme (the state in files under parallel.offload_dir)");
}

void check_parallel(Checker& c) {
  // The world size is known only when the run starts (parallel/grid.cpp checks dp x tp x pp against it).
  const ParallelSettings& p = c.s.parallel;
  const ModelSettings& m = c.s.model;
  auto divisors = [](int64_t n) {
    std::string d;
    for (int64_t k = 1; k <= n && k <= 64; ++k)
      if (n % k == 0) d += (d.empty() ? "" : ", ") + str(k);
    return d;
  };
  if (m.n_head % p.tp != 0)
    c.error("parallel.tp",
            "(" + str(p.tp) + ") must divide model.n_head (" + str(m.n_head) + "): each rank computes whole heads",
            "use one of " + divisors(m.n_head));
  else if (m.kv_heads() % p.tp != 0)
    c.error("parallel.tp",
            "(" + str(p.tp) + ") must divide model.n_kv_head (" + str(m.kv_heads()) +
                "): each rank computes whole key/value heads",
            "use one of " + divisors(m.kv_heads()));
  else if (const int64_t width = c.rules.model.mlp_hidden(m); width % p.tp != 0)
    c.error(
        "parallel.tp",
        "(" + str(p.tp) + ") must divide the MLP width (" + str(width) + ", from model.mlp_ratio or model.mlp_width)",
        "use one of " + divisors(width) + ", or change model.mlp_ratio / model.mlp_width");
  if (p.tp > 1 && m.quantize.enabled() && p.zero == 3)
    c.error("parallel.zero",
            "3 with parallel.tp and a 4-bit base (model.quantize): ZeRO-3 does not shard tensor-parallel 4-bit "
            "slices in this version",
            "use parallel.zero: 0, 1 or 2 with parallel.tp, or parallel.tp: 1 with parallel.zero: 3");
  if (c.s.optim.name == OptimName::kMuon && p.tp > 1 && p.zero == 3)
    c.error("parallel.zero",
            "3 with parallel.tp > 1 splits each matrix twice, and optim.name: muon gathers a matrix's shards over "
            "one of the two only in this version",
            "use parallel.zero: 0, 1 or 2 with parallel.tp, or parallel.tp: 1 with parallel.zero: 3");
  if (p.tp > 1 && m.moe.enabled())
    c.error("parallel.tp",
            "mixture-of-experts layers (model.moe.experts > 0) are not split by tensor parallelism in this version",
            "use parallel.tp: 1 (data and pipeline parallelism work with experts)");
  if (p.ep > 1 && !m.moe.enabled())
    c.error("parallel.ep",
            "(" + str(p.ep) + ") splits mixture-of-experts layers, and this model has none (model.moe.experts is 0)",
            "use parallel.ep: 1, or set model.moe");
  else if (p.ep > 1 && m.moe.experts % p.ep != 0)
    c.error("parallel.ep",
            "(" + str(p.ep) + ") must divide model.moe.experts (" + str(m.moe.experts) +
                "): every rank holds the same number of experts",
            "use one of " + divisors(m.moe.experts));
  if (p.ep > 1 && p.dp > 0 && p.dp % p.ep != 0)  // with dp auto, the run's start checks it against the world
    c.error("parallel.ep",
            "(" + str(p.ep) + ") must divide parallel.dp (" + str(p.dp) +
                "): the experts are split over ep of the data-parallel ranks",
            "use one of " + divisors(p.dp) + ", or parallel.dp: auto");
  if (!cuts_into_chunks(m.seq_len, p.cp)) {
    std::string works;  // the degrees that cut this seq_len into equal chunks (1 always does)
    for (int64_t k = 1; k <= 64 && 2 * k <= m.seq_len; ++k)
      if (cuts_into_chunks(m.seq_len, k)) works += (works.empty() ? "" : ", ") + str(k);
    c.error("parallel.cp",
            "(" + str(p.cp) + ") needs model.seq_len (" + str(m.seq_len) + ") to divide into 2 x " + str(p.cp) +
                " equal chunks: each rank holds two of them",
            "use one of " + works + ", or a model.seq_len that is a multiple of " + str(2 * p.cp));
  }
  if (p.cp_method == ContextMethod::kRing && p.cp > 1 && m.dropout > 0)
    c.error("parallel.cp_method",
            "ring cannot drop attention weights (model.dropout is above 0): its backward recomputes each "
            "block's attention from the saved log-sum-exp",
            "set model.dropout: 0, or parallel.cp_method: allgather");
  if (p.cp_method == ContextMethod::kRing && p.cp == 1)
    c.warning("parallel.cp_method", "ring has no effect with parallel.cp: 1", "remove it, or set parallel.cp above 1");
  if (p.pp > m.n_layer)
    c.error("parallel.pp",
            "(" + str(p.pp) + ") exceeds model.n_layer (" + str(m.n_layer) + "): every stage needs a block",
            "use at most " + str(m.n_layer) + " stages");
  const int64_t sequences = c.s.train.grad_accum_steps * c.s.train.per_device_batch_size;  // 0 with batch size auto
  if (p.pp_microbatches > 0 && sequences > 0 && sequences % p.pp_microbatches != 0)
    c.error("parallel.pp_microbatches",
            "(" + str(p.pp_microbatches) + ") must divide the " + str(sequences) +
                " sequences of a step (grad_accum_steps x per_device_batch_size)",
            "use one of " + divisors(sequences));
  // ZeRO-2 keeps each gradient on its owner alone, and the two stages that
  // hold the tied embedding split their parameters among different owners, so
  // its two gradients could not be summed.
  if (p.pp > 1 && p.zero == 2 && m.tie_embeddings)
    c.error("parallel.zero",
            "2 cannot be combined with pipeline parallelism (parallel.pp: " + str(p.pp) +
                ") and tied embeddings: the first and last stage must sum the embedding's whole gradients",
            "use parallel.zero: 1 (the optimizer state stays sharded), or model.tie_embeddings: false");
  check_fully_sharded(c);
  if (p.pp == 1 && p.pp_microbatches > 0)
    c.warning("parallel.pp_microbatches", "has no effect without pipeline parallelism (parallel.pp: 1)", "remove it");
  if (p.offload_optimizer == OptimizerOffload::kCpu && c.s.run.device == "cpu")
    c.warning("parallel.offload_optimizer", "cpu has no effect when training on the CPU (the state is there already)",
              "remove it, or use nvme with parallel.zero: 3 (the state in files)");
  if (!p.offload_dir.empty() && p.offload_optimizer != OptimizerOffload::kNvme)
    c.warning("parallel.offload_dir", "has no effect without parallel.offload_optimizer: nvme", "remove it");
  if (p.offload_optimizer == OptimizerOffload::kNvme && c.s.checkpoint.async)
    c.warning("checkpoint.async",
              "copies each rank's whole optimizer state into host memory at every save, which "
              "parallel.offload_optimizer: nvme keeps in a file",
              "use checkpoint.async: false where the state does not fit in memory");
}

}  // namespace

// kernels.cuda_graphs replays one fixed sequence of kernels: whatever needs
// the host inside a step (routing counts, collectives between processes, the
// recomputation's saved random state under dropout) cannot be in it.
void check_kernels(Checker& c) {
  if (!c.s.kernels.cuda_graphs) return;
  const std::string key = "kernels.cuda_graphs";
  const ParallelSettings& p = c.s.parallel;
  if (c.s.run.device == "cpu")
    c.warning(key, "has no effect when training on the CPU (CUDA graphs are a GPU feature)", "remove it");
  if (c.s.model.moe.enabled())
    c.error(key, "cannot capture a mixture-of-experts step: routing reads expert counts back to the host inside it",
            "set kernels.cuda_graphs: false, or remove model.moe");
  const bool dropout = c.s.model.dropout > 0 || (c.s.model.lora.rank > 0 && c.s.model.lora.dropout > 0);
  if (c.s.train.gradient_checkpointing != CheckpointingPolicy::kNone && dropout)
    c.error(key,
            "cannot be combined with train.gradient_checkpointing while model.dropout or model.lora.dropout "
            "is above 0 (the recomputation restores the random generators' state for the dropout masks "
            "inside the step, which a graph cannot capture)",
            "set the dropout to 0, train.gradient_checkpointing: none, or kernels.cuda_graphs: false");
  if (p.tp > 1 || p.pp > 1 || p.ep > 1 || p.cp > 1 || p.dp > 1)
    c.error(key,
            "captures the step of a single process; this recipe splits the run over several "
            "(parallel.dp, tp, pp, ep or cp > 1)",
            "set kernels.cuda_graphs: false for multi-process runs");
}

void validate_settings(const Settings& s, const std::map<std::string, Origin>& origins, const RecipeRules& rules,
                       Diagnostics& diag) {
  Checker c{s, origins, rules, diag};
  check_run(c);
  check_model(c);
  check_data(c);
  check_train(c);
  check_batch(c);
  check_optim(c);
  check_alignment(c);
  check_checkpoint(c);
  check_parallel(c);
  check_kernels(c);
}

}  // namespace gputrain
