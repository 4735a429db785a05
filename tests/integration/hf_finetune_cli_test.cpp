// Fine-tuning the models people have (docs/finetune-hf.md): a tiny random model of each
// architecture is built by transformers with its real config class, stored sharded in bf16, and
// taken through model.init_from with no shape key in the recipe. Its logits must be
// transformers' on the same tokens; it trains through the CLI, exports as a Hugging Face folder
// (sharded, with its tokenizer) that transformers loads with our logits, and a LoRA run's adapters
// load in PEFT. Bad folders give exit-2 errors naming the file and the fix.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "checkpoint/hf_export.h"
#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "config/recipe.h"
#include "export_reference.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "test_util.h"
#include "util/atomic_file.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kSeq = 48;  // past the rope-scaled models' original context (16) and Mistral's window (16)

// A transformers model of `cls` with `config` (tiny, random), saved to dir/base in bf16, sharded at
// 40KB; dir/reference.safetensors holds its logits on dir/tokens.safetensors.
void save_base(const TempDir& dir, const std::string& cls, const nlohmann::json& config, int64_t vocab) {
  write_safetensors(dir.file("tokens.safetensors"), {{"tokens", at::randint(0, vocab, {2, kSeq}, at::kLong)}});
  const nlohmann::json spec = {{"class", cls}, {"config", config}, {"dtype", "bfloat16"}, {"max_shard_size", "40KB"}};
  CHECK_THAT(hf_interop({"save", dir.file("base"), dir.file("tokens.safetensors"), dir.file("reference.safetensors"),
                         spec.dump()}),
             Contains(cls));
  REQUIRE(fs::exists(dir.path() / "base" / "model.safetensors.index.json"));  // sharded, as large models are
}

// A recipe that fine-tunes dir/base: no model shape key, synthetic tokens, a checkpoint at the end.
std::string write_recipe(const TempDir& dir, const std::string& extra = "") {
  const std::string path = dir.file("recipe.yaml");
  // Appended piece by piece: g++ 12 warns (-Wstringop-overflow, wrongly) on one long chain of temporaries.
  std::string text = "model:\n  init_from: base\n  seq_len: ";
  text.append(std::to_string(kSeq)).append("\n").append(extra);
  text +=
      "data:\n  train: {format: synthetic, synthetic: {vocab: 200}}\n"
      "train: {max_steps: 3, per_device_batch_size: 2, log_every: 1, eval_every: 0}\n"
      "optim: {lr: 0.01, schedule: {warmup_steps: 0}}\n"
      "checkpoint: {every: 3}\nrun: {threads: 2}\nmetrics: {progress: off}\n";
  write_file(path, text);
  return path;
}

// The imported model gives transformers' logits (fp32 on both sides, from the same bf16 weights).
void check_import_logits(const TempDir& dir, const Settings& s) {
  Gpt model = build_initial_model(s, torch::kCPU, torch::kFloat);
  const torch::Tensor tokens = *read_safetensors(dir.file("tokens.safetensors")).find("tokens");
  const torch::Tensor theirs = *read_safetensors(dir.file("reference.safetensors")).find("logits");
  const torch::Tensor ours = logits_of(model, tokens);
  REQUIRE(theirs.sizes() == ours.sizes());
  CHECK((theirs - ours).abs().max().item<double>() < 1e-4);
  CHECK(ours.abs().max().item<double>() > 0.1);
}

// Import (logits), 3 steps through the CLI, export sharded, transformers loads the export with our logits.
Settings round_trip(const std::string& cls, const nlohmann::json& config, int64_t vocab,
                    const std::string& extra_recipe = "") {
  TempDir dir;
  save_base(dir, cls, config, vocab);
  const std::string recipe = write_recipe(dir, extra_recipe);
  const Settings s = load_recipe(recipe, {}, recipe_rules()).settings;
  CHECK(architecture(s.model).hf.class_name == cls);
  check_import_logits(dir, s);

  const CommandResult run = run_recipe(recipe, dir.file("run"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("weights from"));
  const CommandResult exp =
      run_gputrain({"export", dir.file("run"), "--out", dir.file("hf"), "--max-shard-size", "60KB"});
  INFO(exp.output);
  REQUIRE(exp.exit_code == 0);
  const nlohmann::json index = read_json(dir.file("hf/model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  CHECK(shards.size() > 1);  // at 60KB
  for (const std::string& shard : shards) CHECK(fs::exists(dir.path() / "hf" / shard));
  CHECK(fs::exists(dir.path() / "hf" / "generation_config.json"));
  const nlohmann::json exported = read_json(dir.file("hf/config.json"));
  CHECK(exported["torch_dtype"] == "float32");  // trained in fp32
  CHECK(exported["architectures"][0] == cls);
  check_export_logits(find_checkpoint(dir.file("run")), dir.file("hf"), cls);
  return s;
}

nlohmann::json llama_config(nlohmann::json extra) {
  nlohmann::json c = {{"vocab_size", 300},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"max_position_embeddings", 128},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 500000.0}};
  if (extra.is_object()) c.update(extra);
  return c;
}

// A GPT-2 of d 64, 2 blocks, 64 positions, no dropout.
nlohmann::json gpt2_config() {
  return {{"vocab_size", 300}, {"n_embd", 64},       {"n_layer", 2},      {"n_head", 4},
          {"n_positions", 64}, {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
}

}  // namespace

TEST_CASE("hf: a Llama 3.1 (llama3 rope scaling, grouped-query) fine-tunes from a sharded bf16 folder and exports",
          "[hf][python][slow]") {
  const nlohmann::json scaling = {{"rope_type", "llama3"},
                                  {"factor", 8.0},
                                  {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0},
                                  {"original_max_position_embeddings", 16}};
  const Settings s = round_trip("LlamaForCausalLM", llama_config({{"rope_scaling", scaling}}), 300);
  CHECK(s.model.rope_scaling.type == RopeScalingType::kLlama3);
  CHECK(s.model.rope_scaling.original_max_positions == 16);
  CHECK(s.model.n_kv_head == 2);
  CHECK(s.model.max_positions == 128);
  CHECK(s.model.tie_embeddings == false);
}

TEST_CASE("hf: a Llama 3.2 (tied embeddings) and a Llama with head_dim, attention biases and linear scaling",
          "[hf][python][slow]") {
  const nlohmann::json llama3 = {{"rope_type", "llama3"},
                                 {"factor", 32.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 16}};
  CHECK(round_trip("LlamaForCausalLM", llama_config({{"tie_word_embeddings", true}, {"rope_scaling", llama3}}), 300)
            .model.tie_embeddings);
  const Settings s = round_trip(
      "LlamaForCausalLM",
      llama_config(
          {{"head_dim", 32}, {"attention_bias", true}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}}),
      300);
  CHECK(s.model.head_width() == 32);  // 4 heads of 32 on a 64-wide stream
  CHECK(s.model.attention_biased());
  CHECK_FALSE(s.model.mlp_biased());
}

TEST_CASE("hf: a Llama with yarn scaling, and one with dynamic scaling, match transformers", "[hf][python][slow]") {
  const nlohmann::json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  CHECK(round_trip("LlamaForCausalLM", llama_config({{"rope_scaling", yarn}}), 300).model.rope_scaling.type ==
        RopeScalingType::kYarn);
  // Dynamic scaling only acts past max_position_embeddings, which training never reaches: here it imports,
  // trains and exports as the unscaled model; generate_cli_test.cpp checks it where it acts.
  const nlohmann::json dynamic = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  CHECK(round_trip("LlamaForCausalLM", llama_config({{"rope_scaling", dynamic}}), 300).model.rope_scaling.type ==
        RopeScalingType::kDynamic);
}

TEST_CASE("hf: a Qwen2 (q/k/v biases, tied) fine-tunes from a sharded bf16 folder and exports", "[hf][python][slow]") {
  const Settings s =
      round_trip("Qwen2ForCausalLM", llama_config({{"tie_word_embeddings", true}, {"rope_theta", 1000000.0}}), 300);
  CHECK(s.model.arch == ModelArch::kQwen2);
  CHECK(linear_biases(s.model).qkv);
  CHECK_FALSE(linear_biases(s.model).out);
}

TEST_CASE("hf: a Mistral with a sliding window shorter than the sequence matches transformers", "[hf][python][slow]") {
  const Settings s = round_trip("MistralForCausalLM", llama_config({{"sliding_window", 16}}), 300);
  CHECK(s.model.sliding_window == 16);
}

TEST_CASE("hf: a GPT-2 folder fine-tunes with every shape from its config.json", "[hf][python][slow]") {
  const nlohmann::json gpt2 = gpt2_config();
  const Settings s = round_trip("GPT2LMHeadModel", gpt2, 300);
  CHECK(s.model.d_model == 64);
  CHECK(s.model.tie_embeddings);
}

TEST_CASE("hf: a recipe key that disagrees with config.json, and the plan of an imported model", "[hf][python]") {
  TempDir dir;
  save_base(dir, "LlamaForCausalLM", llama_config({}), 300);
  const std::string recipe = write_recipe(dir, "  d_model: 32\n");
  const CommandResult bad = run_gputrain({"validate", recipe, "--set", "model.seq_len=4096"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("model.d_model: is 32, but model.init_from's config.json") &&
                             Contains("hidden_size 64") && Contains("set model.d_model: 64"));
  CHECK_THAT(bad.output, Contains("model.seq_len: (4096) is longer than the 128 positions"));
  const CommandResult plan = run_gputrain({"plan", write_recipe(dir)});
  INFO(plan.output);
  CHECK(plan.exit_code == 0);
  CHECK_THAT(plan.output, Contains("parameters"));
}

TEST_CASE("hf: bad model folders are exit-2 errors naming the file and the fix", "[hf][python]") {
  TempDir dir;
  save_base(dir, "LlamaForCausalLM", llama_config({}), 300);
  const std::string recipe = write_recipe(dir);
  const fs::path base = dir.path() / "base";
  std::vector<std::string> shards;  // in the index's order
  const nlohmann::json base_index = read_json((base / "model.safetensors.index.json").string());
  for (const auto& [name, shard] : base_index["weight_map"].items())
    if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end()) shards.push_back(shard);
  REQUIRE(shards.size() >= 2);
  auto copy_base = [&](const std::string& name) {
    fs::copy(base, dir.path() / name, fs::copy_options::recursive);
    return dir.path() / name;
  };
  auto run_with = [&](const fs::path& folder) {
    const CommandResult r = run_gputrain(
        {"run", recipe, "--output-dir", dir.file("out"), "--overwrite", "--set", "model.init_from=" + folder.string()});
    CHECK(r.exit_code == 2);
    return r.output;
  };
  // No config.json.
  const fs::path no_config = copy_base("no_config");
  fs::remove(no_config / "config.json");
  CHECK_THAT(run_with(no_config), Contains("no_config' has no config.json") && Contains("fix:"));
  // A config.json that is not JSON.
  const fs::path broken = copy_base("broken");
  write_file((broken / "config.json").string(), "{\"model_type\": ");
  CHECK_THAT(run_with(broken), Contains("broken/config.json' is not valid JSON") &&
                                   Contains("fix: use the config.json save_pretrained wrote"));
  // An architecture gputrain does not implement: the ones it does are named.
  const fs::path gemma = copy_base("gemma");
  nlohmann::json config = read_json((gemma / "config.json").string());
  config["model_type"] = "gemma";
  config["architectures"] = {"GemmaForCausalLM"};
  write_file((gemma / "config.json").string(), config.dump());
  CHECK_THAT(run_with(gemma), Contains("gemma (GemmaForCausalLM) model, which gputrain does not implement") &&
                                  Contains("Qwen2ForCausalLM") && Contains("MistralForCausalLM"));
  // A missing shard.
  const fs::path missing = copy_base("missing");
  REQUIRE(fs::remove(missing / shards[1]));
  CHECK_THAT(run_with(missing), Contains("model.safetensors.index.json' puts") &&
                                    Contains(shards[1] + "', which is not in the folder") &&
                                    Contains("fix: download every shard"));
  // Tensor shapes that disagree with config.json.
  const fs::path narrow = copy_base("narrow");
  config = read_json((narrow / "config.json").string());
  config["intermediate_size"] = 96;
  write_file((narrow / "config.json").string(), config.dump());
  CHECK_THAT(run_with(narrow),
             Contains("narrow/model-") && Contains("but this model's is [") && Contains("96") && Contains("fix:"));
  // An index naming a tensor no shard holds.
  const fs::path ghost = copy_base("ghost");
  nlohmann::json index = read_json((ghost / "model.safetensors.index.json").string());
  index["weight_map"]["model.layers.0.self_attn.extra.weight"] = shards[0];
  write_file((ghost / "model.safetensors.index.json").string(), index.dump());
  CHECK_THAT(run_with(ghost),
             Contains("puts model.layers.0.self_attn.extra.weight in '" + shards[0] + "', which does not hold it"));
}

namespace {

// A LoRA run on every Linear of `cls`'s blocks exports adapters (`modules` of them) that PEFT puts on
// the base with the merged model's logits.
void check_peft_round_trip(const std::string& cls, const nlohmann::json& config, size_t modules) {
  CAPTURE(cls);
  TempDir dir;
  save_base(dir, cls, config, 300);
  const std::string recipe = write_recipe(dir, "  lora: {rank: 4, alpha: 8, targets: [qkv, proj, mlp_up, mlp_down]}\n");
  const CommandResult run = run_recipe(recipe, dir.file("run"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const CommandResult exp = run_gputrain({"export", dir.file("run"), "--out", dir.file("adapter"), "--format", "peft"});
  INFO(exp.output);
  REQUIRE(exp.exit_code == 0);
  const nlohmann::json adapter = read_json(dir.file("adapter/adapter_config.json"));
  CHECK(adapter["r"] == 4);
  CHECK(adapter["target_modules"].size() == modules);

  // Our model with the adapters merged, against PEFT's base + adapter.
  const fs::path checkpoint = find_checkpoint(dir.file("run"));
  const Settings s = settings_from_saved_recipe(read_file((checkpoint / "recipe.yaml").string()),
                                                (checkpoint / "recipe.yaml").string(), architecture_rules());
  ModelSettings plain = s.model;
  plain.lora.rank = 0;
  Gpt model(plain);
  load_module_weights(*model, checkpoint_plain_weights(checkpoint, s), checkpoint.string(), "");
  const torch::Tensor tokens = *read_safetensors(dir.file("tokens.safetensors")).find("tokens");
  CHECK_THAT(hf_interop({"peft", dir.file("base"), dir.file("tokens.safetensors"), dir.file("peft.safetensors"),
                         dir.file("adapter")}),
             Contains("adapted modules: " + std::to_string(modules)));
  const torch::Tensor theirs = *read_safetensors(dir.file("peft.safetensors")).find("logits");
  const torch::Tensor ours = logits_of(model, tokens);
  const torch::Tensor base_logits = *read_safetensors(dir.file("reference.safetensors")).find("logits");
  CHECK((theirs - ours).abs().max().item<double>() < 1e-4);
  CHECK((base_logits - ours).abs().max().item<double>() > 1e-3);  // the adapters changed the model
  // --format hf of a LoRA run needs --merge-lora, and says --format peft is the other way.
  CHECK_THAT(run_gputrain({"export", dir.file("run"), "--out", dir.file("plain")}).output, Contains("--format peft"));
}

}  // namespace

TEST_CASE("hf: a LoRA run on a Hugging Face Llama exports adapters that PEFT loads with our logits",
          "[hf][python][slow]") {
  check_peft_round_trip("LlamaForCausalLM", llama_config({}), 2 * 7);  // q, k, v, o, gate, up, down in 2 layers
}

TEST_CASE("hf: a LoRA run on a Hugging Face GPT-2 exports Conv1D adapters that PEFT loads with our logits",
          "[hf][python][slow]") {
  const nlohmann::json gpt2 = gpt2_config();
  check_peft_round_trip("GPT2LMHeadModel", gpt2, 2 * 4);  // c_attn, attn.c_proj, c_fc, mlp.c_proj in 2 layers
}

TEST_CASE("hf: an export carries the base model's tokenizer, or the one the data was prepared with",
          "[hf][python][slow]") {
  TempDir dir;
  const std::string tokenizer = reference_tokenizer("gpt2");  // tokenizer.json + tokenizer_config.json
  save_base(dir, "LlamaForCausalLM", llama_config({{"vocab_size", 50304}}), 50304);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(tokenizer) / name, dir.path() / "base" / name);
  const std::string text = "To be, or not to be, that is the question: 12345 \xc3\xa9t\xc3\xa9.\n";
  write_file(dir.file("text.txt"), text);
  auto ids_of = [&](const std::string& folder) {
    hf_interop({"tokenize", folder, dir.file("text.txt"), dir.file("ids.json")});
    return read_json(dir.file("ids.json"));
  };
  const nlohmann::json expected = ids_of(tokenizer);
  // From the base model's folder.
  REQUIRE(run_recipe(write_recipe(dir), dir.file("run")).exit_code == 0);
  REQUIRE(run_gputrain({"export", dir.file("run"), "--out", dir.file("hf")}).exit_code == 0);
  CHECK(ids_of(dir.file("hf")) == expected);
  // From the data's sidecars, when the base folder has none.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) fs::remove(dir.path() / "base" / name);
  write_file(dir.file("corpus.txt"), std::string(4000, 'a') + "\n" + text);
  const CommandResult prep = run_gputrain({"data", "prepare", dir.file("corpus.txt"), "-o", dir.file("shards"),
                                           "--tokenizer", tokenizer + "/tokenizer.json"});
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  const CommandResult run =
      run_recipe(write_recipe(dir), dir.file("run2"),
                 {"data.train.format=tokens", "data.train.path=" + dir.file("shards") + "/train_*.bin"});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run_gputrain({"export", dir.file("run2"), "--out", dir.file("hf2")}).exit_code == 0);
  CHECK(fs::exists(dir.path() / "hf2" / "tokenizer.json"));
  CHECK(ids_of(dir.file("hf2")) == expected);
}
