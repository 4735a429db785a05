// `gputrain eval` and train.eval_full through the binary: the loss over every window of a file
// equals transformers' on the run's export, two processes give one process's result, a run's
// periodic full evaluation equals the command's, and what cannot be evaluated is an exit-2 error.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// 6,000 bytes of real text from the middle of tinyshakespeare (not what the run trains on).
std::string held_out_text(const TempDir& dir) {
  const std::string all = read_file(shared_data("tinyshakespeare.txt"));
  write_file(dir.file("held_out.txt"), all.substr(1000000, 6000));
  return dir.file("held_out.txt");
}

// `eval` (a data.eval line) and `train` (the train section) vary.
std::string tiny_llama_recipe(const TempDir& dir, const std::string& eval = "",
                              const std::string& train = "{per_device_batch_size: 8, max_steps: 20, log_every: 10}") {
  const std::string text = shared_data("tinyshakespeare.txt");
  const std::string path = dir.file("r.yaml");
  std::string r = "run: {name: ev, threads: 2}\n";
  r.append("model: {arch: llama, vocab_size: 256, seq_len: 32, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32}\n");
  r.append("data:\n  train: {format: text, path: ").append(text).append(", span: [0.0, 0.05]}\n").append(eval);
  r.append("train: ").append(train).append("\n");
  r.append("optim: {lr: 5e-3, schedule: {warmup_steps: 5}}\nmetrics: {progress: off}\n");
  write_file(path, r);
  return path;
}

}  // namespace

TEST_CASE("eval: the loss over every window of a file equals transformers' on the export, in one process or two",
          "[eval][python]") {
  TempDir dir;
  const std::string text = held_out_text(dir);
  const CommandResult trained = run_recipe(tiny_llama_recipe(dir), dir.file("run"));
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  REQUIRE(run_gputrain({"export", dir.file("run"), "--out", dir.file("hf")}).exit_code == 0);

  const json ours = eval_json(dir, shell_quoted(dir.file("run")) + " --data '" + text + "' --batch-size 7");
  const CommandResult ref = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py", "textloss",
                                        dir.file("hf"), text, dir.file("ref.json"), "32"});
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  const json expected = read_json(dir.file("ref.json"));
  CHECK(ours["windows"] == expected["windows"]);  // (6000 - 1) / 32 = 187: every window once
  CHECK(ours["windows"] == 187);
  CHECK(ours["tokens"] == expected["tokens"]);
  CHECK(ours["loss"].get<double>() == Approx(expected["loss"].get<double>()).epsilon(1e-5));
  CHECK(ours["perplexity"].get<double>() == Approx(std::exp(ours["loss"].get<double>())));
  CHECK(ours["bytes"] == ours["tokens"]);  // a byte per token
  CHECK(ours["bits_per_byte"].get<double>() == Approx(ours["loss"].get<double>() / std::log(2.0)));
  CHECK(ours["step"] == 20);

  // Two processes read a share each; the sums are the same dataset's.
  const json two = eval_json(dir, shell_quoted(dir.file("run")) + " --data '" + text + "' --nproc-per-node 2");
  CHECK(two["world_size"] == 2);
  CHECK(two["tokens"] == ours["tokens"]);
  CHECK(two["windows"] == ours["windows"]);
  CHECK(two["loss"].get<double>() == Approx(ours["loss"].get<double>()).epsilon(1e-6));  // other batches: fp32 sums
  // Each evaluation is also kept in the run folder.
  const std::vector<json> kept = read_jsonl(dir.file("run/eval.jsonl"));
  REQUIRE(kept.size() == 2);
  CHECK(kept[0]["loss"] == ours["loss"]);
}

TEST_CASE("eval: train.eval_full evaluates every window of data.eval, as gputrain eval does", "[eval]") {
  TempDir dir;
  const std::string text = held_out_text(dir);
  const std::string recipe =
      tiny_llama_recipe(dir, "  eval: {format: text, path: " + text + "}\n",
                        "{per_device_batch_size: 8, max_steps: 20, log_every: 10, eval_every: 10, eval_full: true}");
  const CommandResult r = run_recipe(recipe, dir.file("run"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const double trained = read_json(dir.file("run/summary.json"))["eval_loss"].get<double>();
  const json full = eval_json(dir, shell_quoted(dir.file("run")));  // the recipe's data.eval
  CHECK(full["data"] == "data.eval");
  CHECK(full["windows"] == 187);
  CHECK(trained == Approx(full["loss"].get<double>()).epsilon(1e-5));  // metrics round to 6 digits
}

TEST_CASE("eval: what cannot be evaluated is an exit-2 error saying why", "[eval]") {
  TempDir dir;
  // The quickstart's data is synthetic and endless.
  REQUIRE(run_quickstart_briefly(dir.file("quick")).exit_code == 0);
  auto synthetic = run_gputrain({"eval", dir.file("quick")});
  CHECK(synthetic.exit_code == 2);
  CHECK_THAT(synthetic.output, Contains("synthetic") && Contains("fix:"));
  auto missing = run_gputrain({"eval", dir.file("quick"), "--data", dir.file("nowhere.txt")});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("nowhere.txt"));
  // train.eval_full needs data with an end.
  write_file(dir.file("bad.yaml"),
             "data:\n  train: {format: synthetic}\n  eval: {format: synthetic}\ntrain: {eval_full: true}\n");
  CHECK_THAT(recipe_error(dir.file("bad.yaml")), Contains("train.eval_full") && Contains("synthetic"));
}
