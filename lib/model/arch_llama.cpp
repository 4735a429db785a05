// Llama (model.arch: llama): pre-RMSNorm blocks, rotary positions (Hugging Face's "rotate half"
// layout), a SwiGLU MLP, grouped-query attention (model.n_kv_head), and by default no Linear
// biases and an untied output head.
//
// Hugging Face LlamaForCausalLM: our names are GPT-2's (model/gpt.h), so the mapping renames and
// splits:
//  - transformer.wte -> model.embed_tokens, transformer.ln_f -> model.norm,
//    ln_1 / ln_2 -> input_layernorm / post_attention_layernorm;
//  - attn.c_attn's rows [q; k; v] -> self_attn.q_proj, k_proj, v_proj; attn.c_proj -> self_attn.o_proj;
//  - mlp.c_fc's rows [gate; up] -> mlp.gate_proj, up_proj; mlp.c_proj -> mlp.down_proj.
// Weights are Linear [out, in] on both sides, and our rotary embedding uses the same layout, so q
// and k need no permutation. Padded vocabulary rows are cut on export and keep their values on
// import, as for GPT-2. lm_head.weight is left out when embeddings are tied.
#include <ATen/ATen.h>

#include <cmath>
#include <map>

#include "model/architecture.h"
#include "model/hf_mapping.h"
#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// One of our tensors and the Hugging Face tensors its rows are made of, in order.
struct Mapping {
  std::string ours;
  std::vector<std::string> theirs;
  std::vector<int64_t> rows;  // rows of each part (empty: a single part)
};

std::vector<Mapping> mappings(const ModelSettings& m) {
  std::vector<Mapping> out = {{"transformer.wte.weight", {"model.embed_tokens.weight"}, {}}};
  const int64_t d = m.d_model, kv = m.kv_width(), h = mlp_hidden(m);
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".", l = "model.layers." + std::to_string(i) + ".";
    out.push_back({b + "ln_1.weight", {l + "input_layernorm.weight"}, {}});
    out.push_back({b + "ln_2.weight", {l + "post_attention_layernorm.weight"}, {}});
    for (const char* kind : {"weight", "bias"}) {
      if (std::string(kind) == "bias" && !m.bias) continue;
      const std::string k = kind;
      out.push_back({b + "attn.c_attn." + k,
                     {l + "self_attn.q_proj." + k, l + "self_attn.k_proj." + k, l + "self_attn.v_proj." + k},
                     {d, kv, kv}});
      out.push_back({b + "attn.c_proj." + k, {l + "self_attn.o_proj." + k}, {}});
      out.push_back({b + "mlp.c_fc." + k, {l + "mlp.gate_proj." + k, l + "mlp.up_proj." + k}, {h, h}});
      out.push_back({b + "mlp.c_proj." + k, {l + "mlp.down_proj." + k}, {}});
    }
  }
  out.push_back({"transformer.ln_f.weight", {"model.norm.weight"}, {}});
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", {"lm_head.weight"}, {}});
  return out;
}

// rope_theta from config.json (transformers 5: rope_parameters.rope_theta; 4: rope_theta), refusing
// rope scaling, which our rotary embedding does not implement.
void check_rope(const nlohmann::json& config, const ModelSettings& m, const std::string& source) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!config.contains(key) || !config[key].is_object()) continue;
    const auto& r = config[key];
    const std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default")
      throw data_error(
          source + ": config.json's " + key + " uses rope_type '" + type +
          "', which gputrain's rotary embedding does not implement (it computes the default, unscaled one)" +
          "\n    fix: init from a Llama model with unscaled rotary embeddings");
    check_config_float(r, "rope_theta", "model.rope_theta", m.rope_theta, source + " (" + key + ")");
  }
  check_config_float(config, "rope_theta", "model.rope_theta", m.rope_theta, source);
}

std::vector<NamedTensor> to_hf_llama(const std::vector<NamedTensor>& ours, const ModelSettings& m) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, t] : ours) by_name[name] = exported_tensor(name, t, m);
  std::vector<NamedTensor> out;
  for (const Mapping& map : mappings(m)) {
    const torch::Tensor& w = by_name.at(map.ours);
    if (map.rows.empty()) {
      out.push_back({map.theirs.front(), w});
      continue;
    }
    const auto parts = w.split_with_sizes(map.rows, 0);
    for (size_t k = 0; k < parts.size(); ++k) out.push_back({map.theirs[k], parts[k].contiguous()});
  }
  return out;
}

json hf_llama_config(const ModelSettings& m) {
  json c;
  c["architectures"] = json::array({"LlamaForCausalLM"});
  c["model_type"] = "llama";
  c["vocab_size"] = m.vocab_size;
  c["hidden_size"] = m.d_model;
  c["intermediate_size"] = mlp_hidden(m);
  c["num_hidden_layers"] = m.n_layer;
  c["num_attention_heads"] = m.n_head;
  c["num_key_value_heads"] = m.kv_heads();
  c["head_dim"] = m.head_dim();
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = m.seq_len;  // trained context; rotary positions have no table
  c["rms_norm_eps"] = m.norm_eps;
  // transformers 5 reads rope_parameters, 4 reads rope_theta.
  c["rope_theta"] = m.rope_theta;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  c["attention_bias"] = m.bias;
  c["mlp_bias"] = m.bias;
  c["attention_dropout"] = m.dropout;
  c["initializer_range"] = 0.02;
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["bos_token_id"] = gpt2_eot_id(m);
  c["eos_token_id"] = gpt2_eot_id(m);
  c["use_cache"] = true;
  c["dtype"] = "float32";
  return c;
}

std::vector<NamedTensor> from_hf_llama(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                       const std::vector<NamedTensor>& current, const ModelSettings& m,
                                       const std::string& source) {
  check_config_model_type(config, m, source);
  check_config_int(config, "hidden_size", "model.d_model", m.d_model, source);
  check_config_int(config, "num_hidden_layers", "model.n_layer", m.n_layer, source);
  check_config_int(config, "num_attention_heads", "model.n_head", m.n_head, source);
  check_config_int(config, "num_key_value_heads", "model.n_kv_head", m.kv_heads(), source);
  check_config_int(config, "intermediate_size", "model.mlp_width", mlp_hidden(m), source);
  check_config_int(config, "head_dim", "model.n_head (d_model / n_head)", m.head_dim(), source);
  check_config_float(config, "rms_norm_eps", "model.norm_eps", m.norm_eps, source);
  check_config_bool(config, "attention_bias", "model.bias", m.bias, source);
  check_config_bool(config, "mlp_bias", "model.bias", m.bias, source);
  check_config_bool(config, "tie_word_embeddings", "model.tie_embeddings", m.tie_embeddings, source);
  check_rope(config, m, source);
  if (config.contains("hidden_act") && config["hidden_act"] != "silu")
    throw data_error(source + ": config.json's hidden_act is " + config["hidden_act"].dump() +
                     "; gputrain's Llama MLP is SwiGLU (silu)\n    fix: init from a Llama model with hidden_act silu");

  std::map<std::string, torch::Tensor> theirs;
  for (const auto& [name, t] : hf)
    if (!name.ends_with("rotary_emb.inv_freq")) theirs[name] = t;  // a buffer older files hold
  if (m.tie_embeddings && theirs.count("lm_head.weight") && theirs.count("model.embed_tokens.weight") &&
      at::equal(theirs["lm_head.weight"], theirs["model.embed_tokens.weight"]))
    theirs.erase("lm_head.weight");  // a tied copy written out

  const std::string fix_shapes =
      "\n    fix: make model.* match the checkpoint's config.json (hidden_size -> d_model, "
      "num_hidden_layers -> n_layer, num_attention_heads -> n_head, num_key_value_heads -> "
      "n_kv_head, intermediate_size -> mlp_width, vocab_size, attention_bias -> bias)";
  // Rename (and join the split projections) into our names; fit_to_model checks every shape.
  std::map<std::string, torch::Tensor> given;
  for (const Mapping& map : mappings(m)) {
    std::vector<torch::Tensor> parts;
    for (const std::string& name : map.theirs) {
      auto it = theirs.find(name);
      if (it == theirs.end())
        throw data_error(source + ": has no " + name + " (is it a Llama checkpoint?)" + fix_shapes);
      parts.push_back(it->second.to(torch::kFloat));
      theirs.erase(it);
    }
    if (parts.size() > 1)
      for (size_t k = 0; k < parts.size(); ++k)
        // q/k/v and gate/up all read the d_model-wide residual stream.
        if (parts[k].dim() < 1 || parts[k].size(0) != map.rows[k] ||
            (parts[k].dim() == 2 && parts[k].size(1) != m.d_model))
          throw data_error(source + ": " + map.theirs[k] + " is " + shape_str(parts[k]) + " but this model's is " +
                           std::to_string(map.rows[k]) + " rows" + fix_shapes);
    given[map.ours] = parts.size() == 1 ? parts.front() : at::cat(parts, 0);
  }
  for (const auto& [name, t] : theirs) given[name] = t;  // leftovers: fit_to_model names them
  return fit_to_model(std::move(given), current, m, source, "Llama", fix_shapes);
}

// 2/3 of mlp_ratio x d_model (SwiGLU's three matrices then hold about the parameters of GELU's two),
// rounded up to a multiple of 64, as Llama does.
int64_t mlp_width(const ModelSettings& m) {
  const auto two_thirds =
      static_cast<int64_t>(std::ceil(2.0 * m.mlp_ratio * static_cast<double>(m.d_model) / 3.0 - 1e-9));
  return (two_thirds + 63) / 64 * 64;
}

void check(const ModelSettings& m, std::vector<KeyProblem>& problems) {
  if (m.d_model % m.n_head == 0 && m.head_dim() % 2 != 0)
    problems.push_back({"model.n_head",
                        "gives a head dimension of " + std::to_string(m.head_dim()) +
                            ", but rotary position embeddings rotate pairs of dimensions and need an even one",
                        "choose n_head so that d_model / n_head is even"});
}

}  // namespace

extern const Architecture kLlamaArchitecture = {
    .id = ModelArch::kLlama,
    .name = "llama",
    .display_name = "Llama",
    .norm = NormKind::kRmsNorm,
    .mlp = MlpKind::kSwiGlu,
    .positions = PositionKind::kRotary,
    .default_bias = false,
    .default_tie_embeddings = false,
    .mlp_width_from_ratio = mlp_width,
    .check = check,
    .hf = {.model_type = "llama",
           .class_name = "LlamaForCausalLM",
           .family = "Llama",
           .to_hf = to_hf_llama,
           .config = hf_llama_config,
           .from_hf = from_hf_llama},
};

}  // namespace gputrain
