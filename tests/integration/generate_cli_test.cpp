// `gputrain generate` through the binary: greedy output equals transformers' generate() on the same
// weights (Hugging Face folders of each architecture made by transformers, and a trained run against
// its own export); sampling is seeded; several samples, JSON, streamed text and a prompt from stdin;
// and what cannot be generated from is an exit-2 error saying why.
#include <catch2/catch.hpp>

#include <filesystem>

#include <ATen/ATen.h>

#include "checkpoint/safetensors.h"
#include "export_reference.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// gputrain generate's stdout alone (its messages go to stderr, shown on failure).
std::string generate_stdout(const TempDir& dir, const std::string& args) {
  const CommandResult r = run_shell("\"$GPUTRAIN\" generate " + args + " > '" + dir.file("stdout") + "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_file(dir.file("stdout"));
}

json generate_json(const TempDir& dir, const std::string& args) {
  return json::parse(generate_stdout(dir, args + " --json"));
}

// transformers' greedy continuation of `prompt_ids` from `model_dir`.
std::vector<int64_t> reference_greedy(const TempDir& dir, const std::string& model_dir, const json& prompt_ids,
                                      int64_t max_new) {
  write_file(dir.file("prompt.json"), prompt_ids.dump());
  const CommandResult r = run_python({interop_script(), "generate", model_dir, dir.file("prompt.json"),
                                      dir.file("reference.json"), std::to_string(max_new)});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(dir.file("reference.json")).get<std::vector<int64_t>>();
}

// A random model of `cls` saved by transformers (bf16), then greedy from it on both sides. Its
// vocabulary is the bytes tokenizer's (257: bytes and the end-of-text), the ids the prompt is given in.
void check_hf_folder_greedy(const std::string& cls, const json& config) {
  TempDir dir;
  write_safetensors(dir.file("tokens.safetensors"), {{"tokens", at::randint(0, 257, {1, 8}, at::kLong)}});
  const json spec = {{"class", cls}, {"config", config}, {"dtype", "bfloat16"}};
  const CommandResult saved = run_python({interop_script(), "save", dir.file("base"), dir.file("tokens.safetensors"),
                                          dir.file("logits.safetensors"), spec.dump()});
  INFO(saved.output);
  REQUIRE(saved.exit_code == 0);
  const json ours =
      generate_json(dir, shell_quoted(dir.file("base")) +
                             " --tokenizer bytes --prompt 'To be, or not' --temperature 0 --max-new-tokens 24");
  REQUIRE(ours["prompt_ids"].size() == 14);  // the bytes tokenizer's end-of-text, then 13 bytes
  const json& sample = ours["samples"][0];
  INFO(sample.dump());
  CHECK(sample["ids"].get<std::vector<int64_t>>() == reference_greedy(dir, dir.file("base"), ours["prompt_ids"], 24));
  CHECK((sample["ids"].size() == 24 || sample["stop"] == "eos"));
}

json llama_config(json extra) {
  json c = {{"vocab_size", 257},
            {"hidden_size", 64},
            {"intermediate_size", 128},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 128},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0}};
  c.update(extra);
  return c;
}

// A Llama on tinyshakespeare's bytes, trained a few steps: a run folder with a checkpoint.
std::string train_llama(const TempDir& dir) {
  const std::string text = shared_data("tinyshakespeare.txt");
  write_file(dir.file("r.yaml"),
             "run: {name: gen, threads: 2}\n"
             "model: {arch: llama, vocab_size: 256, seq_len: 64, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 64}\n"
             "data:\n  train: {format: text, path: " +
                 text +
                 ", span: [0.0, 0.05]}\n"
                 "train: {per_device_batch_size: 8, max_steps: 30, log_every: 10}\n"
                 "optim: {lr: 5e-3, schedule: {warmup_steps: 5}}\n"
                 "metrics: {progress: off}\n");
  const CommandResult r = run_recipe(dir.file("r.yaml"), dir.file("run"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir.file("run");
}

}  // namespace

TEST_CASE("generate: greedy output from Hugging Face folders equals transformers' generate", "[generate][python]") {
  SECTION("Llama, grouped-query") { check_hf_folder_greedy("LlamaForCausalLM", llama_config(json::object())); }
  SECTION("Qwen2, q/k/v biases") {
    check_hf_folder_greedy("Qwen2ForCausalLM", llama_config({{"tie_word_embeddings", true}}));
  }
  SECTION("Llama, dynamic rope scaling past its 16 positions") {
    // 14 prompt positions, then 24 new ones: from position 16 on, each new token's rotation uses the
    // base grown for its length (the keys already cached keep theirs), as transformers computes it.
    check_hf_folder_greedy(
        "LlamaForCausalLM",
        llama_config({{"max_position_embeddings", 16}, {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}}));
  }
  SECTION("Mistral, a window of 8 inside 38 positions") {
    check_hf_folder_greedy("MistralForCausalLM", llama_config({{"sliding_window", 8}}));
  }
  SECTION("GPT-2, learned positions") {
    check_hf_folder_greedy("GPT2LMHeadModel", {{"vocab_size", 257},
                                               {"n_embd", 64},
                                               {"n_layer", 2},
                                               {"n_head", 4},
                                               {"n_positions", 64},
                                               {"resid_pdrop", 0.0},
                                               {"embd_pdrop", 0.0},
                                               {"attn_pdrop", 0.0}});
  }
}

TEST_CASE("generate: a trained run's greedy text equals transformers' on its export, and sampling is seeded",
          "[generate][python]") {
  TempDir dir;
  const std::string run = train_llama(dir);
  const CommandResult exported = run_gputrain({"export", run, "--out", dir.file("hf")});
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);

  const std::string greedy_args = shell_quoted(run) + " --prompt 'ROMEO:' --temperature 0 --max-new-tokens 30";
  const json greedy = generate_json(dir, greedy_args);
  CHECK(greedy["step"] == 30);
  CHECK(greedy["prompt_ids"] == json::array({'R', 'O', 'M', 'E', 'O', ':'}));  // text data: raw bytes, no framing
  const std::vector<int64_t> ids = greedy["samples"][0]["ids"].get<std::vector<int64_t>>();
  CHECK(ids.size() == 30);
  CHECK(ids == reference_greedy(dir, dir.file("hf"), greedy["prompt_ids"], 30));
  // Streamed text is the prompt and the same continuation; a prompt from stdin is the same prompt.
  const std::string text = greedy["samples"][0]["text"].get<std::string>();
  CHECK(generate_stdout(dir, greedy_args) == "ROMEO:" + text + "\n");
  const CommandResult piped =
      run_shell("printf 'ROMEO:' | \"$GPUTRAIN\" generate '" + run +
                "' --prompt - --temperature 0 --max-new-tokens 30 --json > '" + dir.file("piped") + "'");
  REQUIRE(piped.exit_code == 0);
  CHECK(json::parse(read_file(dir.file("piped")))["samples"][0]["ids"] == greedy["samples"][0]["ids"]);
  // top-k 1 is greedy whatever the temperature.
  CHECK(
      generate_json(dir, shell_quoted(run) + " --prompt 'ROMEO:' --top-k 1 --max-new-tokens 30")["samples"][0]["ids"] ==
      greedy["samples"][0]["ids"]);

  // Sampling: the same seed draws the same samples, another seed others; --num-samples draws a batch.
  const std::string sampled = shell_quoted(run) + " --prompt 'ROMEO:' --temperature 1 --top-p 0.95 --max-new-tokens 20";
  const json a = generate_json(dir, sampled + " --seed 5 --num-samples 3");
  REQUIRE(a["samples"].size() == 3);
  CHECK(a["samples"] == generate_json(dir, sampled + " --seed 5 --num-samples 3")["samples"]);
  CHECK(a["samples"] != generate_json(dir, sampled + " --seed 6 --num-samples 3")["samples"]);
  CHECK(a["samples"][0]["ids"] != a["samples"][1]["ids"]);
  // Several samples are printed whole, one after another (the barely trained model writes any byte: no text compared).
  const std::string several = generate_stdout(dir, sampled + " --seed 5 --num-samples 3");
  for (const char* header : {"=== sample 1 (max_new_tokens) ===\nROMEO:", "=== sample 2 (max_new_tokens) ===\nROMEO:",
                             "=== sample 3 (max_new_tokens) ===\nROMEO:"})
    CHECK_THAT(several, Contains(header));

  // The model's 64 positions end a long generation: the last token is predicted from the 64th.
  const json full = generate_json(dir, shell_quoted(run) + " --prompt 'ROMEO:' --temperature 0 --max-new-tokens 500");
  CHECK(full["samples"][0]["stop"] == "context");
  CHECK(full["samples"][0]["ids"].size() == 64 - 6 + 1);
}

TEST_CASE("generate: what cannot be generated from is an exit-2 error saying why", "[generate]") {
  TempDir dir;
  // The quickstart trains on synthetic token ids: no text to give them.
  REQUIRE(run_quickstart_briefly(dir.file("quick")).exit_code == 0);
  auto synthetic = run_gputrain({"generate", dir.file("quick"), "--prompt", "hello"});
  CHECK(synthetic.exit_code == 2);
  CHECK_THAT(synthetic.output, Contains("synthetic") && Contains("fix:"));
  // With a tokenizer named, the prompt's ids must fit the model's vocabulary (the quickstart's is small).
  auto too_wide = run_gputrain({"generate", dir.file("quick"), "--prompt", "hello", "--tokenizer", "bytes"});
  CHECK(too_wide.exit_code == 2);
  CHECK_THAT(too_wide.output, Contains("past the model's vocabulary") && Contains("fix:"));
  // A folder that is no run, checkpoint or model folder.
  fs::create_directories(dir.file("empty"));
  auto empty = run_gputrain({"generate", dir.file("empty"), "--prompt", "x"});
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.output, Contains("empty") && Contains("no complete gputrain checkpoint"));
  auto no_prompt = run_gputrain({"generate", dir.file("quick")});
  CHECK(no_prompt.exit_code == 2);
  CHECK_THAT(no_prompt.output, Contains("--prompt"));
}
