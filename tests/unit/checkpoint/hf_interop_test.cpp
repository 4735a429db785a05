// Hugging Face interop, GPT-2 and Llama: the exported names and shapes are
// transformers', an export read back through model.init_from gives the same
// logits, and transformers itself (tests/reference/hf_interop.py) agrees in
// both directions on the same tokens.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <filesystem>
#include <map>

#include "checkpoint/hf_export.h"
#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "config/schema.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/hf_mapping.h"
#include "test_util.h"
#include "util/atomic_file.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

// Every parameter random (biases and LayerNorms too), so a mapping mistake shows in the logits.
Gpt random_model(const ModelSettings& m, uint64_t seed) {
  torch::manual_seed(seed);
  Gpt model(m);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_(0.0, p.dim() == 1 ? 0.1 : 0.05);
  model->eval();
  return model;
}

torch::Tensor logits(Gpt& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  return model->forward(tokens).narrow(-1, 0, model->cfg.vocab_size);
}

// A checkpoint holding `model`'s weights, as a run would save it.
std::filesystem::path save_checkpoint(Gpt& model, const ModelSettings& m, const std::filesystem::path& root) {
  Settings s;
  s.model = m;
  TrainingSnapshot snap;
  snap.counters.step = 7;
  snap.rng = capture_rng(torch::kCPU);
  snap.settings = settings_to_json(s);
  snap.recipe_yaml = recipe_to_yaml(s);
  snap.model = module_weights(*model);
  return save_training_checkpoint(root, snap);
}

ModelSettings small(bool tied, bool bias) {
  ModelSettings m = model_settings(100, 32, 2, 4, 64);
  m.pad_vocab_to_multiple_of = 64;  // 128 rows: the padding is cut on export
  m.tie_embeddings = tied;
  m.bias = bias;
  return m;
}

// 4 query heads sharing 2 key/value heads, SwiGLU width 96.
ModelSettings small_llama(bool tied, bool bias) {
  ModelSettings m = small(tied, bias);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  m.mlp_width = 96;
  m.rope_theta = 5000.0;
  m.norm_eps = 1e-6;
  return m;
}

std::vector<int64_t> sizes_of(const torch::Tensor& t) { return t.sizes().vec(); }

// `args` run through tests/reference/hf_interop.py; REQUIREs success and returns its output.
std::string hf_interop(const std::vector<std::string>& args) {
  std::vector<std::string> all = {std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py"};
  all.insert(all.end(), args.begin(), args.end());
  auto r = run_python(all);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// A random model of shape `m`, exported and loaded by transformers (as `architecture`), gives our
// logits on the same tokens: fp32 on the CPU, where the attention implementations differ only in
// the order of their sums.
void check_transformers_logits(const ModelSettings& m, const char* architecture) {
  TempDir dir;
  Gpt model = random_model(m, 1);
  save_checkpoint(model, m, dir.path() / "ckpt");
  export_hf(dir.path() / "ckpt", dir.path() / "hf", false);
  const auto tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
  write_safetensors(dir.file("tokens.safetensors"), {{"tokens", tokens}});
  CHECK_THAT(hf_interop({"logits", dir.file("hf"), dir.file("tokens.safetensors"), dir.file("logits.safetensors")}),
             Contains(architecture));
  const torch::Tensor theirs = *read_safetensors(dir.file("logits.safetensors")).find("logits");
  const torch::Tensor ours = logits(model, tokens);
  REQUIRE(theirs.sizes() == ours.sizes());
  CHECK((theirs - ours).abs().max().item<double>() < 1e-4);
  // Not a comparison of near-zeros: 1e-4 stays under 0.2% of the largest logit (norm scales of N(0, 0.1)
  // keep this small model's logits under 0.1: 0.081 with the 2026-11-28 initialization's random draws).
  CHECK(ours.abs().max().item<double>() > 0.05);
}

}  // namespace

TEST_CASE("GPT-2 124M exports under GPT-2's own names and Conv1D shapes", "[checkpoint][hf]") {
  ModelSettings m;  // the defaults are GPT-2 124M, with GPT-2's real vocabulary padded to 50304
  m.vocab_size = 50257;
  m.pad_vocab_to_multiple_of = 64;
  std::vector<NamedTensor> ours;
  for (const auto& p : gpt_parameter_shapes(m)) ours.push_back({p.name, at::zeros(p.sizes)});
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& t : to_hf_tensors(ours, m, at::kFloat)) got[t.name] = sizes_of(t.tensor);

  // GPT2LMHeadModel.from_pretrained("gpt2").state_dict(), less the tied lm_head.weight.
  std::map<std::string, std::vector<int64_t>> gpt2 = {{"transformer.wte.weight", {50257, 768}},
                                                      {"transformer.wpe.weight", {1024, 768}},
                                                      {"transformer.ln_f.weight", {768}},
                                                      {"transformer.ln_f.bias", {768}}};
  for (int i = 0; i < 12; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) gpt2[h + ln + ".weight"] = {768}, gpt2[h + ln + ".bias"] = {768};
    gpt2[h + "attn.c_attn.weight"] = {768, 2304};
    gpt2[h + "attn.c_attn.bias"] = {2304};
    gpt2[h + "attn.c_proj.weight"] = {768, 768};
    gpt2[h + "attn.c_proj.bias"] = {768};
    gpt2[h + "mlp.c_fc.weight"] = {768, 3072};
    gpt2[h + "mlp.c_fc.bias"] = {3072};
    gpt2[h + "mlp.c_proj.weight"] = {3072, 768};
    gpt2[h + "mlp.c_proj.bias"] = {768};
  }
  CHECK(got.size() == 148);
  CHECK(got == gpt2);

  const auto config = architecture(ModelArch::kGpt).hf.config(m);
  CHECK(config["n_embd"] == 768);
  CHECK(config["n_layer"] == 12);
  CHECK(config["n_positions"] == 1024);
  CHECK(config["vocab_size"] == 50257);
  CHECK(config["activation_function"] == "gelu_new");
  CHECK(config["eos_token_id"] == 50256);
}

TEST_CASE("An exported checkpoint read back through model.init_from gives the same logits", "[checkpoint][hf]") {
  for (bool tied : {true, false})
    for (bool bias : {true, false}) {
      CAPTURE(tied, bias);
      TempDir dir;
      const ModelSettings m = small(tied, bias);
      Gpt model = random_model(m, 1);
      const auto ckpt = save_checkpoint(model, m, dir.path() / "checkpoints");
      export_hf(dir.path(), dir.path() / "hf", /*overwrite=*/false);  // a run's output dir: its newest checkpoint
      CHECK(std::filesystem::exists(dir.path() / "hf" / "config.json"));

      Gpt copy = random_model(m, 2);
      load_initial_weights(*copy, m, (dir.path() / "hf").string());
      const auto tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
      CHECK(at::equal(logits(model, tokens), logits(copy, tokens)));

      // The checkpoint itself also works as init_from (our names, weights only).
      Gpt again = random_model(m, 3);
      load_initial_weights(*again, m, ckpt.string());
      CHECK(at::equal(logits(model, tokens), logits(again, tokens)));
    }
}

TEST_CASE("Exporting refuses to replace model files unless asked", "[checkpoint][hf]") {
  TempDir dir;
  const ModelSettings m = small(true, true);
  Gpt model = random_model(m, 1);
  save_checkpoint(model, m, dir.path() / "ckpt");
  export_hf(dir.path() / "ckpt", dir.path() / "hf", false);
  CHECK_THROWS_WITH(export_hf(dir.path() / "ckpt", dir.path() / "hf", false), Contains("--overwrite"));
  CHECK_NOTHROW(export_hf(dir.path() / "ckpt", dir.path() / "hf", true));
  CHECK_THROWS_WITH(export_hf(dir.path() / "hf", dir.path() / "x", false), Contains("no complete gputrain checkpoint"));
}

TEST_CASE("model.init_from refuses weights of another shape and names the recipe key", "[checkpoint][hf]") {
  TempDir dir;
  const ModelSettings m = small(true, true);
  Gpt model = random_model(m, 1);
  const auto ckpt = save_checkpoint(model, m, dir.path() / "ckpt");
  export_hf(ckpt, dir.path() / "hf", false);

  ModelSettings deeper = m;
  deeper.n_layer = 3;
  Gpt other = random_model(deeper, 2);
  CHECK_THROWS_WITH(load_initial_weights(*other, deeper, (dir.path() / "hf").string()),
                    Contains("n_layer 2") && Contains("set model.n_layer: 2"));
  CHECK_THROWS_WITH(load_initial_weights(*other, deeper, ckpt.string()), Contains("no weights for transformer.h.2"));

  ModelSettings longer = m;
  longer.seq_len = 64;  // more positions than the export has
  Gpt longer_model = random_model(longer, 2);
  CHECK_THROWS_WITH(load_initial_weights(*longer_model, longer, (dir.path() / "hf").string()),
                    Contains("model.seq_len (64) is longer than the 32 positions"));

  ModelSettings no_bias = m;
  no_bias.bias = false;
  Gpt no_bias_model = random_model(no_bias, 2);
  CHECK_THROWS_WITH(load_initial_weights(*no_bias_model, no_bias, (dir.path() / "hf").string()),
                    Contains("model.bias: true"));
  try {
    load_initial_weights(*other, deeper, (dir.path() / "hf").string());
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kData);
  }
}

TEST_CASE("transformers' GPT2LMHeadModel loads our export and gives our logits", "[checkpoint][hf][python]") {
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    check_transformers_logits(small(tied, true), "GPT2LMHeadModel");
  }
}

TEST_CASE("A GPT-2 saved by transformers' save_pretrained loads through model.init_from with its logits",
          "[checkpoint][hf][python]") {
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    TempDir dir;
    ModelSettings m = small(tied, true);
    m.seq_len = 16;  // GPT-2 has 32 positions here: a shorter context keeps the first 16
    const auto tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
    write_safetensors(dir.file("tokens.safetensors"), {{"tokens", tokens}});
    hf_interop({"save-gpt2", dir.file("saved"), dir.file("tokens.safetensors"), dir.file("logits.safetensors"), "64",
                "2", "4", "100", "32", tied ? "1" : "0"});
    Gpt model = random_model(m, 5);
    load_initial_weights(*model, m, dir.file("saved"));
    const torch::Tensor theirs = *read_safetensors(dir.file("logits.safetensors")).find("logits");
    CHECK((theirs - logits(model, tokens)).abs().max().item<double>() < 1e-4);
    // The bare file works too (config.json beside it is still read).
    Gpt from_file = random_model(m, 6);
    load_initial_weights(*from_file, m, dir.file("saved/model.safetensors"));
    CHECK(at::equal(logits(model, tokens), logits(from_file, tokens)));
  }
}

TEST_CASE("Llama exports under LlamaForCausalLM's names, q/k/v and gate/up split, and a Llama config",
          "[checkpoint][hf][llama]") {
  const ModelSettings m = small_llama(/*tied=*/false, /*bias=*/false);
  std::vector<NamedTensor> ours;
  for (const auto& p : gpt_parameter_shapes(m)) ours.push_back({p.name, at::randn(p.sizes)});
  std::map<std::string, std::vector<int64_t>> got;
  std::map<std::string, torch::Tensor> hf;
  for (const auto& t : to_hf_tensors(ours, m, at::kFloat)) got[t.name] = sizes_of(t.tensor), hf[t.name] = t.tensor;
  // LlamaForCausalLM(config).state_dict() for this shape: 2 layers x 9 tensors + embeddings, norm, head.
  std::map<std::string, std::vector<int64_t>> llama = {
      {"model.embed_tokens.weight", {100, 64}}, {"model.norm.weight", {64}}, {"lm_head.weight", {100, 64}}};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    llama[l + "input_layernorm.weight"] = {64};
    llama[l + "post_attention_layernorm.weight"] = {64};
    llama[l + "self_attn.q_proj.weight"] = {64, 64};
    llama[l + "self_attn.k_proj.weight"] = {32, 64};  // 2 key/value heads of 16
    llama[l + "self_attn.v_proj.weight"] = {32, 64};
    llama[l + "self_attn.o_proj.weight"] = {64, 64};
    llama[l + "mlp.gate_proj.weight"] = {96, 64};
    llama[l + "mlp.up_proj.weight"] = {96, 64};
    llama[l + "mlp.down_proj.weight"] = {64, 96};
  }
  CHECK(got == llama);
  // The split takes c_attn's rows in order: q, then k, then v; c_fc's gate, then up.
  const torch::Tensor c_attn = ours[2].tensor;  // wte, ln_1, c_attn, ...
  REQUIRE(ours[2].name == "transformer.h.0.attn.c_attn.weight");
  CHECK(at::equal(hf["model.layers.0.self_attn.k_proj.weight"], c_attn.narrow(0, 64, 32)));
  CHECK(at::equal(hf["model.layers.0.self_attn.v_proj.weight"], c_attn.narrow(0, 96, 32)));

  const auto config = architecture(ModelArch::kLlama).hf.config(m);
  CHECK(config["architectures"][0] == "LlamaForCausalLM");
  CHECK(config["num_key_value_heads"] == 2);
  CHECK(config["intermediate_size"] == 96);
  CHECK(config["rope_parameters"]["rope_theta"] == 5000.0);
  CHECK(config["rms_norm_eps"] == 1e-6);
  CHECK(config["tie_word_embeddings"] == false);
}

TEST_CASE("A Llama export read back through model.init_from gives the same logits, mismatches name the key",
          "[checkpoint][hf][llama]") {
  for (bool tied : {true, false})
    for (bool bias : {true, false}) {
      CAPTURE(tied, bias);
      TempDir dir;
      const ModelSettings m = small_llama(tied, bias);
      Gpt model = random_model(m, 1);
      save_checkpoint(model, m, dir.path() / "ckpt");
      const ExportResult r = export_hf(dir.path() / "ckpt", dir.path() / "hf", false);
      CHECK(r.architecture == "LlamaForCausalLM");
      Gpt copy = random_model(m, 2);
      load_initial_weights(*copy, m, (dir.path() / "hf").string());
      const auto tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
      CHECK(at::equal(logits(model, tokens), logits(copy, tokens)));
    }
  TempDir dir;
  const ModelSettings m = small_llama(false, false);
  Gpt model = random_model(m, 1);
  export_hf(save_checkpoint(model, m, dir.path() / "ckpt"), dir.path() / "hf", false);
  const std::string hf = (dir.path() / "hf").string();
  auto refused = [&](ModelSettings other, const std::string& fix) {
    Gpt o = random_model(other, 2);
    CHECK_THROWS_WITH(load_initial_weights(*o, other, hf), Contains(fix));
  };
  ModelSettings mha = m;
  mha.n_kv_head = 4;
  refused(mha, "set model.n_kv_head: 2");
  ModelSettings theta = m;
  theta.rope_theta = 10000.0;
  refused(theta, "set model.rope_theta: 5000.0");
  ModelSettings eps = m;
  eps.norm_eps = 1e-5;
  refused(eps, "set model.norm_eps: 1e-06");
  ModelSettings wider = m;
  wider.mlp_width = 128;
  refused(wider, "set model.mlp_width: 96");
  ModelSettings gpt = small(false, false);
  refused(gpt, "set model.arch: llama");
  // A GPT-2 export read by a llama model: the other way round.
  Gpt g = random_model(gpt, 3);
  export_hf(save_checkpoint(g, gpt, dir.path() / "gpt_ckpt"), dir.path() / "gpt_hf", false);
  Gpt l = random_model(m, 4);
  CHECK_THROWS_WITH(load_initial_weights(*l, m, (dir.path() / "gpt_hf").string()), Contains("set model.arch: gpt"));
  // A rope scaling gputrain does not implement (Phi-3's "longrope") is refused, not silently ignored.
  auto config = read_json((dir.path() / "hf" / "config.json").string());
  config["rope_parameters"]["rope_type"] = "longrope";
  write_file_atomic((dir.path() / "hf" / "config.json").string(), config.dump());
  Gpt same = random_model(m, 5);
  CHECK_THROWS_WITH(load_initial_weights(*same, m, hf), Contains("rope_type 'longrope'"));
}

TEST_CASE("transformers' LlamaForCausalLM loads our export and gives our logits", "[checkpoint][hf][python][llama]") {
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    check_transformers_logits(small_llama(tied, /*bias=*/!tied), "LlamaForCausalLM");
  }
}

TEST_CASE("A Llama saved by transformers' save_pretrained loads through model.init_from with its logits",
          "[checkpoint][hf][python][llama]") {
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    TempDir dir;
    const ModelSettings m = small_llama(tied, /*bias=*/tied);
    const auto tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
    write_safetensors(dir.file("tokens.safetensors"), {{"tokens", tokens}});
    hf_interop({"save-llama", dir.file("saved"), dir.file("tokens.safetensors"), dir.file("logits.safetensors"), "64",
                "2", "4", "2", "96", "100", tied ? "1" : "0", tied ? "1" : "0", "5000", "1e-6"});
    Gpt model = random_model(m, 5);
    load_initial_weights(*model, m, dir.file("saved"));
    const torch::Tensor theirs = *read_safetensors(dir.file("logits.safetensors")).find("logits");
    CHECK((theirs - logits(model, tokens)).abs().max().item<double>() < 1e-4);
  }
}
