// GPT-2 (model.arch: gpt): pre-LayerNorm blocks, learned positions, a GELU (tanh) MLP of
// mlp_ratio x d_model, Linear biases and tied embeddings.
//
// Hugging Face GPT2LMHeadModel: our parameter names are GPT-2's already (model/gpt.h); what differs:
//  - attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are Conv1D in GPT-2, whose weight is
//    [in, out]; ours are Linear, [out, in]: transposed.
//  - GPT-2 has vocab_size embedding rows; ours may be padded (model.pad_vocab_to_multiple_of):
//    the padding rows are cut on export and keep their own initialization on import.
//  - GPT-2 always has Linear biases: model.bias: false exports zeros, and imports only biases
//    that are all zero.
//  - lm_head.weight is left out when embeddings are tied (save_pretrained does the same) and
//    written when they are not.
//  - A GPT2Model checkpoint (no "transformer." prefix) and the attention-mask buffers of older
//    files (attn.bias, attn.masked_bias) are accepted.
#include <ATen/ATen.h>

#include <cmath>
#include <map>

#include "model/architecture.h"
#include "model/hf_mapping.h"
#include "util/error.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// GPT-2's Conv1D layers, whose weights are stored [in, out].
bool is_conv1d_weight(const std::string& name) {
  return name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_proj.weight") ||
         name.ends_with("mlp.c_fc.weight") || name.ends_with("mlp.c_proj.weight");
}

// The Linear biases GPT-2 always has, with their sizes.
std::vector<std::pair<std::string, int64_t>> linear_biases(const ModelSettings& m) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    out.push_back({b + "attn.c_attn.bias", 3 * m.d_model});
    out.push_back({b + "attn.c_proj.bias", m.d_model});
    out.push_back({b + "mlp.c_fc.bias", mlp_hidden(m)});
    out.push_back({b + "mlp.c_proj.bias", m.d_model});
  }
  return out;
}

std::vector<NamedTensor> to_hf_gpt2(const std::vector<NamedTensor>& ours, const ModelSettings& m) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : ours) {
    torch::Tensor w = exported_tensor(name, t, m);
    out.push_back({name, is_conv1d_weight(name) ? w.t().contiguous() : w});
  }
  if (!m.bias)
    for (const auto& [name, size] : linear_biases(m)) out.push_back({name, torch::zeros({size})});
  return out;
}

json hf_gpt2_config(const ModelSettings& m) {
  json c;
  c["architectures"] = json::array({"GPT2LMHeadModel"});
  c["model_type"] = "gpt2";
  c["vocab_size"] = m.vocab_size;
  c["n_positions"] = m.seq_len;
  c["n_ctx"] = m.seq_len;
  c["n_embd"] = m.d_model;
  c["n_layer"] = m.n_layer;
  c["n_head"] = m.n_head;
  c["n_inner"] = mlp_hidden(m) == 4 * m.d_model ? json(nullptr) : json(mlp_hidden(m));
  c["activation_function"] = "gelu_new";  // GELU with the tanh approximation, as ours
  c["resid_pdrop"] = m.dropout;
  c["embd_pdrop"] = m.dropout;
  c["attn_pdrop"] = m.dropout;
  c["layer_norm_epsilon"] = m.norm_eps;
  c["initializer_range"] = 0.02;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["bos_token_id"] = gpt2_eot_id(m);
  c["eos_token_id"] = gpt2_eot_id(m);
  c["dtype"] = "float32";
  return c;
}

std::vector<NamedTensor> from_hf_gpt2(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source) {
  // config.json first: its numbers name the recipe key to change.
  check_config_model_type(config, m, source);
  check_config_int(config, "n_embd", "model.d_model", m.d_model, source);
  check_config_int(config, "n_layer", "model.n_layer", m.n_layer, source);
  check_config_int(config, "n_head", "model.n_head", m.n_head, source);
  check_config_float(config, "layer_norm_epsilon", "model.norm_eps", m.norm_eps, source);
  if (config.contains("activation_function") && config["activation_function"].is_string()) {
    const std::string act = config["activation_function"];
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw data_error(source + ": config.json's activation_function is " + act +
                       "; gputrain's GPT uses GELU with the tanh approximation (gelu_new)" +
                       "\n    fix: init from a GPT-2 model trained with gelu_new");
  }
  check_config_bool(config, "tie_word_embeddings", "model.tie_embeddings", m.tie_embeddings, source);

  std::map<std::string, torch::Tensor> given;
  bool prefixed = false;
  for (const auto& [name, t] : hf) prefixed = prefixed || name.rfind("transformer.", 0) == 0;
  for (const auto& [name, t] : hf) {
    // Mask buffers of older GPT-2 files, not weights.
    if (name.ends_with(".attn.masked_bias") || (name.ends_with(".attn.bias") && t.dim() == 4)) continue;
    const std::string key = prefixed || name == "lm_head.weight" ? name : "transformer." + name;
    given[key] = t;
  }
  if (m.tie_embeddings && given.count("lm_head.weight") && given.count("transformer.wte.weight") &&
      at::equal(given["lm_head.weight"], given["transformer.wte.weight"]))
    given.erase("lm_head.weight");  // a tied copy written out

  // Conv1D weights are [in, out]; model.bias: false takes only biases that are all zero.
  for (auto& [name, t] : given)
    if (is_conv1d_weight(name)) t = t.t();
  if (!m.bias)
    for (const auto& [name, size] : linear_biases(m)) {
      auto it = given.find(name);
      if (it == given.end()) continue;
      if (at::any(it->second != 0).item<bool>())
        throw data_error(source + ": " + name + " is not zero, but model.bias is false" +
                         "\n    fix: set model.bias: true");
      given.erase(it);
    }
  const std::string fix_shapes =
      "\n    fix: make model.* match the checkpoint's config.json (n_embd -> d_model, "
      "n_layer, n_head, n_inner -> mlp_width, n_positions >= seq_len, vocab_size)";
  return fit_to_model(std::move(given), current, m, source, "GPT-2", fix_shapes);
}

int64_t mlp_width(const ModelSettings& m) {
  return static_cast<int64_t>(m.mlp_ratio * static_cast<double>(m.d_model) + 0.5);
}

void check(const ModelSettings& m, std::vector<KeyProblem>& problems) {
  const double hidden = m.mlp_ratio * static_cast<double>(m.d_model);
  if (m.mlp_width == 0 && (std::fabs(hidden - std::round(hidden)) > 1e-6 || hidden < 1))
    problems.push_back({"model.mlp_ratio", "mlp_ratio * d_model = " + std::to_string(hidden) + " is not a whole number",
                        "choose mlp_ratio so that mlp_ratio * d_model is an integer, or set model.mlp_width"});
  if (m.n_kv_head > 0)
    problems.push_back({"model.n_kv_head",
                        "grouped-query attention is part of arch llama; GPT-2 has one key/value head per head",
                        "remove model.n_kv_head, or set model.arch: llama"});
}

}  // namespace

extern const Architecture kGpt2Architecture = {
    .id = ModelArch::kGpt,
    .name = "gpt",
    .display_name = "GPT",
    .norm = NormKind::kLayerNorm,
    .mlp = MlpKind::kGelu,
    .positions = PositionKind::kLearned,
    .default_bias = true,
    .default_tie_embeddings = true,
    .mlp_width_from_ratio = mlp_width,
    .check = check,
    .hf = {.model_type = "gpt2",
           .class_name = "GPT2LMHeadModel",
           .family = "GPT-2",
           .to_hf = to_hf_gpt2,
           .config = hf_gpt2_config,
           .from_hf = from_hf_gpt2},
};

}  // namespace gputrain
