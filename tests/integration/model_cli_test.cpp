// The model options through the gputrain binary: the Llama recipe in
// configs/ trains at tiny size on real text (its loss falls), resumes
// exactly, and exports for transformers' LlamaForCausalLM.
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

std::string config(const char* name) { return std::string(GPUTRAIN_SOURCE_DIR) + "/configs/" + name; }

// configs/llama-shakespeare.yaml shrunk to seconds: 2 blocks of d 64, 4 query and 2 key/value heads.
const std::vector<std::string> kTinyLlama = {
    "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.n_kv_head=2", "model.seq_len=64",
    "train.per_device_batch_size=8", "train.max_steps=40", "train.log_every=5", "train.eval_every=0",
    "train.eval_steps=2", "optim.schedule.warmup_steps=4", "checkpoint.every=20", "run.threads=2",
    "metrics.progress=off"};

// The training losses of a run's metrics.jsonl, in step order.
std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  for (const auto& row : read_jsonl(out + "/metrics.jsonl"))
    if (row.contains("loss")) v.push_back(row["loss"].get<double>());
  return v;
}

CommandResult run_config(const char* name, const std::string& out, std::vector<std::string> sets) {
  std::vector<std::string> args = {"run", config(name), "--output-dir", out};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return run_gputrain(args);
}

}  // namespace

TEST_CASE("cli: configs/llama-shakespeare.yaml trains at tiny size, resumes exactly and exports as LlamaForCausalLM",
          "[cli][llama]") {
  TempDir dir;
  auto r = run_config("llama-shakespeare.yaml", dir.file("llama"), kTinyLlama);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("model: Llama 2 layers, d_model 64, 4 heads (2 key/value)"));
  const auto loss = losses(dir.file("llama"));
  REQUIRE(loss.size() == 8);
  // Bytes start at log(256) = 5.55 nats; 40 steps of real text must take off a good part of that.
  CHECK(loss.front() > 5.0);
  CHECK(loss.back() < loss.front() - 1.5);
  const auto summary = read_json(dir.file("llama") + "/summary.json");
  CHECK(summary["eval_loss"].get<double>() < 4.0);

  // Resumed from step 20, the last 20 steps repeat bitwise.
  std::vector<std::string> resume = kTinyLlama;
  resume.push_back("checkpoint.resume=" + dir.file("llama") + "/checkpoints/step_00000020");
  auto again = run_config("llama-shakespeare.yaml", dir.file("resumed"), resume);
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const auto resumed = losses(dir.file("resumed"));
  REQUIRE(resumed.size() == 4);
  for (size_t i = 0; i < resumed.size(); ++i) CHECK(resumed[i] == loss[loss.size() - 4 + i]);

  auto exported = run_gputrain({"export", dir.file("llama"), "--format", "hf", "--out", dir.file("hf")});
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  CHECK_THAT(exported.output, Contains("as Hugging Face LlamaForCausalLM"));
  const auto hf_config = read_json(dir.file("hf") + "/config.json");
  CHECK(hf_config["num_key_value_heads"] == 2);
  CHECK(hf_config["tie_word_embeddings"] == false);
  CHECK(std::filesystem::exists(dir.file("hf") + "/model.safetensors"));
}
