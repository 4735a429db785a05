#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "config/recipe.h"
#include "data/chat_format.h"
#include "data/loader_bench.h"
#include "data/prepare.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"

namespace gputrain::app {

namespace {

// `data prepare`'s flags as typed, turned into PrepareOptions when the command runs.
struct PrepareArgs {
  PrepareOptions options;
  std::string tokenizer = "gpt2", documents = "file", input_format = "auto", progress = "auto", format = "text";
  int64_t chunk_kb = static_cast<int64_t>(PrepareOptions{}.chunk_bytes >> 10);
};

void report_skipped(const PrepareResult& r) {
  if (r.skipped_rows > 0)
    std::fprintf(stderr, "data prepare: skipped %lld bad row(s) (--skip-bad-rows); the first: %s\n",
                 static_cast<long long>(r.skipped_rows), r.first_skipped.c_str());
}

// --format preference's summary and the recipe lines that use the pairs.
int report_pairs(const PrepareResult& r, const std::string& dir) {
  std::printf("data prepare: %lld train pairs (%lld tokens), %lld val pairs (%lld tokens), %.1f s\n",
              static_cast<long long>(r.train_pairs), static_cast<long long>(r.train_tokens),
              static_cast<long long>(r.val_pairs), static_cast<long long>(r.val_tokens), r.seconds);
  if (!r.chat_template.empty()) std::printf("conversations rendered with the %s template\n", r.chat_template.c_str());
  if (r.truncated_pairs > 0)
    std::printf("%lld pair(s) truncated to --max-length / --max-prompt-length\n",
                static_cast<long long>(r.truncated_pairs));
  if (r.dropped_pairs > 0)
    std::fprintf(stderr, "data prepare: dropped %lld pair(s) whose prompt alone fills --max-length\n",
                 static_cast<long long>(r.dropped_pairs));
  report_skipped(r);
  std::printf("tokenizer %s: %lld ids; set model.vocab_size to at least %lld\n", r.tokenizer.c_str(),
              static_cast<long long>(r.vocab_size), static_cast<long long>(r.vocab_size));
  std::printf("\nuse it in a recipe:\n  train: {objective: dpo}\n  data:\n    train: {format: preference, path: %s}\n",
              r.shards.front().c_str());
  if (r.val_pairs > 0) std::printf("    eval: {format: preference, path: %s}\n", r.shards.back().c_str());
  return 0;
}

int prepare(PrepareArgs a) {
  PrepareOptions& o = a.options;
  o.tokenizer.name = a.tokenizer;
  o.chunk_bytes = static_cast<size_t>(a.chunk_kb) << 10;
  o.chat = a.format == "chat";
  o.preference = a.format == "preference";
  o.documents = a.documents == "lines"        ? DocumentUnit::kLine
                : a.documents == "paragraphs" ? DocumentUnit::kParagraph
                                              : DocumentUnit::kFile;
  o.input_format = a.input_format == "text"    ? InputFormat::kText
                   : a.input_format == "jsonl" ? InputFormat::kJsonl
                                               : InputFormat::kAuto;
  o.progress = a.progress == "bar"     ? ProgressStyle::kBar
               : a.progress == "lines" ? ProgressStyle::kLines
               : a.progress == "off"   ? ProgressStyle::kOff
                                       : ProgressStyle::kAuto;
  PrepareResult r = prepare_dataset(o);
  const std::string dir = std::filesystem::absolute(o.output_dir).lexically_normal().string();
  if (o.preference) return report_pairs(r, dir);
  if (r.status != "ok") {
    std::fprintf(stderr, "data prepare: interrupted; %zu complete shard(s) kept in %s, no partial files\n",
                 r.shards.size(), dir.c_str());
    return 128 + r.signal;
  }
  std::printf(
      "data prepare: %.1f MB -> %lld train tokens (%lld documents), %lld val tokens (%lld documents) "
      "in %zu shard(s), %.1f s (%.1f MB/s)\n",
      r.input_bytes / 1e6, static_cast<long long>(r.train_tokens), static_cast<long long>(r.train_documents),
      static_cast<long long>(r.val_tokens), static_cast<long long>(r.val_documents), r.shards.size(), r.seconds,
      r.input_bytes / 1e6 / r.seconds);
  for (const auto& s : r.shards) std::printf("  %s\n", s.c_str());
  if (!r.chat_template.empty())
    std::printf("chat: rendered with the %s template; loss masks beside the shards (.mask)\n", r.chat_template.c_str());
  report_skipped(r);
  std::printf("tokenizer %s: %lld ids; set model.vocab_size to at least %lld (a multiple of 64 runs faster: %lld)\n",
              r.tokenizer.c_str(), static_cast<long long>(r.vocab_size), static_cast<long long>(r.vocab_size),
              static_cast<long long>((r.vocab_size + 63) / 64 * 64));
  std::printf("\nuse it in a recipe:\n  data:\n    train: {format: tokens, path: %s/train_*.bin}\n", dir.c_str());
  if (r.val_tokens > 0) std::printf("    eval: {format: tokens, path: %s/val_*.bin}\n", dir.c_str());
  return 0;
}

struct BenchArgs {
  CommonArgs common;
  std::vector<int64_t> workers = {0, 1, 2, 4};
  int64_t batches = 200;
};

int bench(const BenchArgs& b) {
  const CommonArgs& a = b.common;
  Recipe recipe = load_recipe(a.recipe, a.overrides, recipe_rules());
  const Settings& s = recipe.settings;
  std::printf("loader of %s: batch %lld x seq_len %lld\n", recipe.source.c_str(),
              static_cast<long long>(s.train.per_device_batch_size), static_cast<long long>(s.model.seq_len));
  std::vector<LoaderBenchRow> rows = bench_loader(s, b.workers, b.batches);
  std::printf("%s", loader_bench_table(rows).c_str());
  double best = 0;
  for (const auto& r : rows) best = std::max(best, r.tokens_per_s);
  std::printf("best %.3g tokens/s = %.1fx what a GPT-2 124M step on one H100 consumes (%.0fk tokens/s)%s\n", best,
              best / kH100Gpt2TokensPerS, kH100Gpt2TokensPerS / 1e3,
              best >= 10 * kH100Gpt2TokensPerS ? "" : "; below the 10x margin: add data.num_workers");
  return 0;
}

void add_prepare(CLI::App* data, Commands& commands) {
  auto a = std::make_shared<PrepareArgs>();
  PrepareOptions& o = a->options;
  auto* cmd = data->add_subcommand("prepare", "encode text or JSONL files into llm.c token shards (+ .json sidecars)");
  cmd->add_option("inputs", o.inputs, "text or JSONL files (documents in this order)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", o.output_dir, "directory for train_*.bin and val_*.bin")->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "bytes (ids 0..255, end-of-document 256), gpt2 (byte-level BPE from --vocab/--merges), or the "
                  "path of a Hugging Face tokenizer.json, a SentencePiece .model, or a model folder holding either")
      ->capture_default_str();
  cmd->add_option("--bos-token", o.tokenizer.bos_token,
                  "the text of the token put before each document, or none (default: the tokenizer's)");
  cmd->add_option("--eos-token", o.tokenizer.eos_token,
                  "the text of the end-of-text token (default: from tokenizer_config.json or the tokenizer)");
  cmd->add_option("--vocab", o.tokenizer.vocab_path, "gpt2: GPT-2's encoder.json")->check(CLI::ExistingFile);
  cmd->add_option("--merges", o.tokenizer.merges_path, "gpt2: GPT-2's vocab.bpe (merges)")->check(CLI::ExistingFile);
  cmd->add_option("--format", a->format,
                  "text: documents of text; chat: JSONL rows of messages or prompt/completion, rendered with a "
                  "chat template, loss on the assistant's tokens only; preference: rows of prompt, chosen and "
                  "rejected (TRL's layouts, docs/preference.md) -> train_pairs.bin, val_pairs.bin")
      ->check(CLI::IsMember({"text", "chat", "preference"}))
      ->capture_default_str();
  cmd->add_option("--max-length", o.max_length,
                  "preference: keep the first N tokens of prompt + completion (TRL's max_length, keep_start); a "
                  "pair whose prompt alone fills it is dropped; 0 = no limit")
      ->capture_default_str();
  cmd->add_option("--max-prompt-length", o.max_prompt_length,
                  "preference: keep the last N tokens of each prompt, before --max-length; 0 = no limit")
      ->capture_default_str();
  cmd->add_option(
         "--chat-template", o.chat_template,
         "chat, preference: the template (docs/data.md; default: the one the tokenizer's special tokens suggest)")
      ->check(CLI::IsMember(chat_template_names()));
  cmd->add_option("--chat-date", o.chat_date,
                  "chat, llama3.1: the system header's \"Today Date\" (default: 26 Jul 2024, its template's own)");
  cmd->add_flag("--skip-bad-rows", o.skip_bad_rows,
                "chat, preference: skip malformed rows (unknown role, no assistant turn, a missing field or empty "
                "completion) instead of stopping; they are counted");
  cmd->add_option("--input-format", a->input_format, "text or jsonl; auto = jsonl for *.jsonl and *.json")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  cmd->add_option("--text-key", o.text_key, "jsonl: the key holding each document's text")->capture_default_str();
  cmd->add_option("--documents", a->documents,
                  "text: what one document is: file, lines, or paragraphs (blank-line separated)")
      ->check(CLI::IsMember({"file", "lines", "paragraphs"}))
      ->capture_default_str();
  cmd->add_option("--val-fraction", o.val_fraction,
                  "the last fraction of the input (by bytes; preference: of the pairs) that becomes val_*.bin")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", o.shard_tokens, "tokens per shard file")->capture_default_str();
  cmd->add_option("--threads", o.threads, "encoding threads; 0 = all cores")->capture_default_str();
  cmd->add_option("--chunk-kb", a->chunk_kb,
                  "text of one encoding task (KiB, cut at a document boundary); the threads encode chunks side by "
                  "side")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
  cmd->add_flag("--overwrite", o.overwrite, "replace the shards already in the output directory");
  cmd->add_option("--progress", a->progress, "auto, bar, lines or off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();
  commands.push_back({cmd, [a] { return prepare(*a); }});
}

void add_bench(CLI::App* data, Commands& commands) {
  auto b = std::make_shared<BenchArgs>();
  auto* cmd = data->add_subcommand("bench", "measure the recipe's data loader (tokens/s by worker count)");
  add_recipe_args(cmd, b->common, false);
  cmd->add_option("--workers", b->workers, "worker counts to measure")->capture_default_str()->expected(1, -1);
  cmd->add_option("--batches", b->batches, "batches per measurement")->capture_default_str()->check(kCount);
  commands.push_back({cmd, [b] { return bench(*b); }});
}

}  // namespace

void add_data(CLI::App& cli, Commands& commands) {
  auto* data = cli.add_subcommand("data", "prepare token shards from text; measure the data loader");
  data->require_subcommand(1);
  add_prepare(data, commands);
  add_bench(data, commands);
}

}  // namespace gputrain::app
