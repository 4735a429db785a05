// data.*.document_attention through the binary: the whole-set eval loss is the same whatever the
// order of the documents (and is not without it), data, tensor and pipeline parallelism give one
// process's numbers, a resumed run continues exactly, and data that cannot say where documents
// start is an exit-2 error naming the key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "data/token_shard.h"
#include "parallel_runs.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kStart = 256;  // the document-start id: the documents' bytes are ids 0..255

// The paragraphs (split at blank lines) of tinyshakespeare's bytes [from, from + bytes): real
// documents of 20 to a few hundred bytes.
std::vector<std::string> paragraphs(size_t from, size_t bytes) {
  const std::string text = read_file(shared_data("tinyshakespeare.txt")).substr(from, bytes);
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find("\n\n", start), text.size());
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 2;
  }
  return out;
}

// A token shard of `docs` in `order`, each document kStart and then its bytes.
void write_documents(const std::string& path, const std::vector<std::string>& docs, const std::vector<size_t>& order) {
  ShardInfo info;
  info.tokenizer = "bytes", info.vocab_size = 257, info.eot_token = kStart;
  ShardWriter w(path, info);
  for (size_t i : order) {
    std::vector<uint32_t> doc{kStart};
    for (unsigned char c : docs[i]) doc.push_back(c);
    w.add_document();
    w.append(doc);
  }
  w.finish();
}

std::vector<size_t> in_order(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

// A tiny Llama (rotary positions, grouped-query) on dir/train.bin and dir/eval.bin, packed by
// document, with document attention on both.
std::string write_recipe(const TempDir& dir) {
  write_documents(dir.file("train.bin"), paragraphs(0, 40000), in_order(paragraphs(0, 40000).size()));
  const std::vector<std::string> held_out = paragraphs(500000, 8000);
  write_documents(dir.file("eval.bin"), held_out, in_order(held_out.size()));
  std::string r = "run: {name: docs, threads: 1}\n";
  r += "model: {arch: llama, vocab_size: 257, seq_len: 64, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32}\n";
  r += "data:\n  train: {format: tokens, path: train.bin, packing: documents, document_attention: true}\n";
  r += "  eval: {format: tokens, path: eval.bin, packing: documents, document_attention: true}\n";
  r += "train: {per_device_batch_size: 4, max_steps: 12, log_every: 1, eval_every: 0}\n";
  r += "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 12}}\nmetrics: {progress: off}\n";
  write_file(dir.file("r.yaml"), r);
  return dir.file("r.yaml");
}

}  // namespace

TEST_CASE("document attention: the whole-set eval loss does not depend on the documents' order, and does without it",
          "[cli][documents]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir);
  // Long enough to read context: a model near the unigram loss would hardly depend on the order.
  const std::vector<std::string> longer = {"train.max_steps=150", "optim.schedule.decay_steps=150", "optim.lr=1e-2"};
  const CommandResult trained = run_recipe(recipe, dir.file("run"), longer);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  // The held-out documents in two orders (the last one last in both: its end has no next start to predict).
  const std::vector<std::string> docs = paragraphs(500000, 8000);
  REQUIRE(docs.size() > 20);
  std::vector<size_t> shuffled = in_order(docs.size() - 1);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  shuffled.push_back(docs.size() - 1);
  write_documents(dir.file("shuffled.bin"), docs, shuffled);

  const std::string run = shell_quoted(dir.file("run"));
  const json a = eval_json(dir, run + " --data " + shell_quoted(dir.file("eval.bin")));
  const json b = eval_json(dir, run + " --data " + shell_quoted(dir.file("shuffled.bin")));
  CHECK(a["tokens"] == b["tokens"]);  // the same targets, in other windows
  CHECK(a["loss"].get<double>() == Approx(b["loss"].get<double>()).epsilon(1e-6));
  // The recipe's own data.eval gives the first order's number.
  CHECK(eval_json(dir, run)["loss"].get<double>() == Approx(a["loss"].get<double>()).epsilon(1e-6));

  // Without document attention, a document is read after others, which depend on the order.
  const CommandResult plain =
      run_recipe(recipe, dir.file("plain"),
                 with(longer, {"data.train.document_attention=false", "data.eval.document_attention=false"}));
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  const std::string other = shell_quoted(dir.file("plain"));
  const double plain_a = eval_json(dir, other + " --data " + shell_quoted(dir.file("eval.bin")))["loss"].get<double>();
  const double plain_b =
      eval_json(dir, other + " --data " + shell_quoted(dir.file("shuffled.bin")))["loss"].get<double>();
  CHECK(std::abs(plain_a - plain_b) > 1e-4);
}

TEST_CASE(
    "document attention: 2 processes (ZeRO-3, ep 2 too), tp 2, cp 2 and 4 (all-gather and ring), and pp 2 match 1 "
    "process, and a resume continues exactly",
    "[cli][documents][parallel][slow]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir);
  REQUIRE(train(recipe, dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const std::vector<std::string> halves = {"train.per_device_batch_size=2"};
  train_like_one_process(dir, recipe, Variant{"dp2", halves, 2}, loss1, norm1, 1e-5);
  train_like_one_process(dir, recipe, Variant{"zero3", with(halves, {"parallel.zero=3"}), 2}, loss1, norm1, 1e-5);
  train_like_one_process(dir, recipe, Variant{"tp2", {"parallel.tp=2"}, 2}, loss1, norm1, kReorderedSums);
  // Each sequence split over 2 and 4 ranks: the chunks' documents meet in the gathered attention.
  train_like_one_process(dir, recipe, Variant{"cp2", {"parallel.cp=2"}, 2}, loss1, norm1, 1e-5);
  train_like_one_process(dir, recipe, Variant{"cp4", {"parallel.cp=4"}, 4}, loss1, norm1, 1e-5);
  train_like_one_process(dir, recipe, Variant{"cp4-ring", {"parallel.cp=4", "parallel.cp_method=ring"}, 4}, loss1,
                         norm1, 1e-5);
  train_like_one_process(
      dir, recipe, Variant{"pp2", {"parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=4"}, 2},
      loss1, norm1, kReorderedSums);
  // Experts split over 2 processes (ep 2) against the same mixture in one (no capacity limit and no
  // balancing loss: both depend on how the batch is split).
  const std::vector<std::string> experts = {"model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0",
                                            "model.moe.aux_loss_coef=0"};
  REQUIRE(train(recipe, dir.file("one-moe"), 0, experts).exit_code == 0);
  train_like_one_process(dir, recipe, Variant{"ep2", with(experts, with(halves, {"parallel.ep=2"})), 2},
                         column(dir.file("one-moe"), "loss"), column(dir.file("one-moe"), "grad_norm"), kReorderedSums);
  // Checkpointed blocks replay their documents' attention in backward.
  train_like_one_process(dir, recipe, Variant{"recompute", {"train.gradient_checkpointing=full"}, 0}, loss1, norm1,
                         1e-5);

  // Stopped at step 6 and resumed: the last 6 steps are the uninterrupted run's, bitwise.
  REQUIRE(train(recipe, dir.file("first"), 0, {"train.max_steps=6", "checkpoint.every=6"}).exit_code == 0);
  const CommandResult resumed =
      train(recipe, dir.file("resumed"), 0,
            {"checkpoint.resume=" + (fs::path(dir.file("first")) / "checkpoints/step_00000006").string()});
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_continues(loss1, column(dir.file("resumed"), "loss"), 6, 0.0);
}

TEST_CASE("document attention without a document-start id, or on text or synthetic data, is an exit-2 error",
          "[cli][documents]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir);
  const std::string text = recipe_error(
      recipe,
      {"data.train.format=text", "data.train.path=" + shared_data("tinyshakespeare.txt"), "data.train.packing=stream"});
  CHECK_THAT(text, Contains("data.train.document_attention") && Contains("format is text") && Contains("fix:"));
  const std::string synthetic = recipe_error(recipe, {"data.train.format=synthetic"});
  CHECK_THAT(synthetic, Contains("data.train.document_attention") && Contains("synthetic"));
  // Shards whose sidecar names no document-start id, with packing: stream.
  fs::remove(sidecar_path(dir.file("train.bin")));
  const CommandResult r = run_recipe(recipe, dir.file("run"), {"data.train.packing=stream"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("data.train") && Contains("document_attention") && Contains("eot_token"));
}
