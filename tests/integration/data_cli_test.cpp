// `gputrain data prepare | bench` end to end, and training on prepared real
// text: GPT-2 tokens of tinyshakespeare, packed by document.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> prepare_args(const std::string& out) {
  return {"data",
          "prepare",
          shared_data("tinyshakespeare.txt"),
          "-o",
          out,
          "--tokenizer",
          "gpt2",
          "--vocab",
          shared_data("gpt2/encoder.json"),
          "--merges",
          shared_data("gpt2/vocab.bpe"),
          "--documents",
          "paragraphs",
          "--val-fraction",
          "0.1",
          "--progress",
          "off"};
}

// Unigram entropy (nats) of the uint16 ids after the 1024-byte header.
double unigram_entropy(const std::string& shard) {
  const std::string bytes = read_file(shard);
  std::map<uint16_t, double> counts;
  double n = 0;
  for (size_t i = 1024; i + 1 < bytes.size(); i += 2, n += 1)
    counts[static_cast<uint16_t>(static_cast<uint8_t>(bytes[i]) | static_cast<uint8_t>(bytes[i + 1]) << 8)] += 1;
  double h = 0;
  for (const auto& [_, c] : counts) h -= c / n * std::log(c / n);
  return h;
}

}  // namespace

TEST_CASE("cli: data prepare writes shards a recipe can train on, and errors exit 2", "[cli][data]") {
  TempDir dir;
  auto r = run_gputrain(prepare_args(dir.file("shk")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("train: {format: tokens, path: " + dir.file("shk") + "/train_*.bin}"));
  CHECK(fs::exists(dir.file("shk/train_000000.bin")));
  CHECK(fs::exists(dir.file("shk/val_000000.json")));
  // Again into the same directory: refused, nothing lost.
  auto again = run_gputrain(prepare_args(dir.file("shk")));
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, Contains("--overwrite"));
  CHECK(fs::exists(dir.file("shk/train_000000.bin")));

  // A recipe whose vocabulary is too small for the shards fails validation.
  write_file(dir.file("small.yaml"),
             "model: {vocab_size: 1000, seq_len: 32, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: tokens, path: shk/train_*.bin}}\n");
  auto v = run_gputrain({"validate", dir.file("small.yaml")});
  CHECK(v.exit_code == 2);
  CHECK_THAT(v.output, Contains("do not fit model.vocab_size (1000)"));
  // A truncated shard is caught before training starts, with nothing written.
  std::string shard = read_file(dir.file("shk/val_000000.bin"));
  write_file(dir.file("trunc.bin"), shard.substr(0, shard.size() - 10));
  write_file(dir.file("trunc.yaml"),
             "model: {vocab_size: 50304, seq_len: 32, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: tokens, path: trunc.bin}}\n");
  auto t = run_gputrain({"run", dir.file("trunc.yaml"), "--output-dir", dir.file("never")});
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.output, Contains("is truncated"));
  CHECK_FALSE(fs::exists(dir.file("never")));
  // Usage errors.
  CHECK(run_gputrain({"data", "prepare", dir.file("nope.txt"), "-o", dir.file("x")}).exit_code == 2);
  CHECK(
      run_gputrain({"data", "prepare", shared_data("tinyshakespeare.txt"), "-o", dir.file("x"), "--tokenizer", "gpt2"})
          .exit_code == 2);  // no --vocab/--merges

  // The loader benchmark prints its table.
  write_file(dir.file("bench.yaml"),
             "model: {vocab_size: 50304, seq_len: 64, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: tokens, path: shk/train_*.bin, packing: documents}}\n");
  auto b = run_gputrain({"data", "bench", dir.file("bench.yaml"), "--workers", "0", "2", "--batches", "20"});
  INFO(b.output);
  CHECK(b.exit_code == 0);
  CHECK_THAT(b.output, Contains("| workers | batches | seconds | tokens/s |"));
  CHECK_THAT(b.output, Contains("x what a GPT-2 124M step on one H100 consumes"));
}

TEST_CASE("cli: a GPT learns GPT-2 tokens of real text, packed by document", "[cli][data][slow]") {
  TempDir dir;
  auto p = run_gputrain(prepare_args(dir.file("shk")));
  REQUIRE(p.exit_code == 0);
  const double unigram = unigram_entropy(dir.file("shk/train_000000.bin"));
  write_file(dir.file("r.yaml"),
             "run: {name: shk, threads: 2}\n"
             "model: {vocab_size: 50304, seq_len: 64, n_layer: 2, n_head: 4, d_model: 64}\n"
             "data:\n"
             "  train: {format: tokens, path: shk/train_*.bin, packing: documents, mask_document_boundaries: true}\n"
             "  eval: {format: tokens, path: shk/val_*.bin, packing: documents, mask_document_boundaries: true}\n"
             "train: {per_device_batch_size: 16, max_steps: 150, log_every: 50, eval_steps: 8}\n"
             "optim: {lr: 3e-3, schedule: {warmup_steps: 20}}\n");
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("out")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("packed by document"));
  auto s = read_json(dir.file("out") + "/summary.json");
  const double eval = s["eval_loss"];
  INFO("unigram " << unigram << " eval " << eval);
  CHECK(eval < unigram - 0.3);                        // it learned context, not just token frequencies
  CHECK(s["tokens"].get<int64_t>() < 150 * 16 * 64);  // padding and masked boundaries take no loss
}
