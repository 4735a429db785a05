#include "model/hf_llama_layout.h"

#include <cmath>

#include "model/architecture.h"
#include "model/hf_mapping.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

const std::vector<std::pair<const char*, RopeScalingType>>& rope_types() {
  static const std::vector<std::pair<const char*, RopeScalingType>> t = {{"default", RopeScalingType::kNone},
                                                                         {"linear", RopeScalingType::kLinear},
                                                                         {"dynamic", RopeScalingType::kDynamic},
                                                                         {"llama3", RopeScalingType::kLlama3},
                                                                         {"yarn", RopeScalingType::kYarn}};
  return t;
}

const char* rope_type_name(RopeScalingType type) {
  for (const auto& [name, t] : rope_types())
    if (t == type) return name;
  return "default";
}

// rope_parameters (transformers 5) or rope_scaling (4.x) as model.rope_scaling.*.
void import_rope_scaling(HfConfigReader& r) {
  const nlohmann::json& c = r.config();
  ModelSettings& m = r.settings();
  const nlohmann::json* params = nullptr;
  std::string where;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (c.contains(key) && c[key].is_object() && !params) {
      params = &c[key];
      where = key;
    }
  std::string type = "default";
  if (params) type = params->value("rope_type", params->value("type", std::string("default")));
  RopeScalingType ours = RopeScalingType::kNone;
  bool known = false;
  for (const auto& [name, t] : rope_types())
    if (type == name) {
      ours = t;
      known = true;
    }
  if (!known) {
    r.refuse("has " + where + " rope_type '" + type + "', which gputrain does not implement (it implements " +
                 "default, linear, dynamic, llama3 and yarn)",
             "init from a model with one of those");
    return;
  }
  RopeScalingSettings& s = m.rope_scaling;
  if (!r.set_by_recipe("model.rope_scaling.type")) {
    s.type = ours;
    r.filled.push_back("model.rope_scaling.type");
  } else if (s.type != ours) {
    r.problems.push_back({"model.rope_scaling.type",
                          std::string("is ") + rope_type_name(s.type) + ", but model.init_from's config.json ('" +
                              r.file() + "') has " + where + " rope_type " + type,
                          "leave model.rope_scaling out of the recipe (config.json sets it)"});
    return;
  }
  if (ours == RopeScalingType::kNone) return;
  HfConfigReader p = r.nested(*params, where);
  if (ours == RopeScalingType::kYarn && !p.has("factor")) {
    // transformers: the ratio of the extended context to the original one.
    const nlohmann::json& orig = params->value("original_max_position_embeddings", nlohmann::json());
    if (orig.is_number() && c.contains("max_position_embeddings") && c["max_position_embeddings"].is_number())
      p.set_float("model.rope_scaling.factor", s.factor,
                  c["max_position_embeddings"].get<double>() / orig.get<double>(),
                  "max_position_embeddings / original_max_position_embeddings");
  } else {
    p.take_float("factor", "model.rope_scaling.factor", s.factor);
  }
  if (ours == RopeScalingType::kLlama3) {
    p.take_float("low_freq_factor", "model.rope_scaling.low_freq_factor", s.low_freq_factor);
    p.take_float("high_freq_factor", "model.rope_scaling.high_freq_factor", s.high_freq_factor);
    p.take_int("original_max_position_embeddings", "model.rope_scaling.original_max_positions",
               s.original_max_positions);
  }
  if (ours == RopeScalingType::kYarn) {
    p.take_int("original_max_position_embeddings", "model.rope_scaling.original_max_positions",
               s.original_max_positions);
    p.take_float("beta_fast", "model.rope_scaling.beta_fast", s.beta_fast, 32.0);
    p.take_float("beta_slow", "model.rope_scaling.beta_slow", s.beta_slow, 1.0);
    p.take_float("attention_factor", "model.rope_scaling.attention_factor", s.attention_factor, 0.0);
    p.take_bool("truncate", "model.rope_scaling.truncate", s.truncate, true);
    if (p.has("mscale") && p.has("mscale_all_dim"))
      p.refuse(
          "has " + where + ".mscale and mscale_all_dim (DeepSeek's YaRN variant), which gputrain does not implement",
          "init from a model with plain yarn scaling");
  }
  r.merge(p);
}

}  // namespace

std::vector<HfTensor> llama_layout_tensors(const ModelSettings& m) {
  std::vector<HfTensor> out = {{"model.embed_tokens.weight", "transformer.wte.weight"}};
  const int64_t q = m.q_width(), kv = m.kv_width(), h = mlp_hidden(m);
  const LinearBiases biases = linear_biases(m);
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".", l = "model.layers." + std::to_string(i) + ".";
    for (const char* kind : {"weight", "bias"}) {
      const bool weight = std::string(kind) == "weight";
      if (weight || biases.qkv) {
        const std::string ours = b + "attn.c_attn." + kind;
        out.push_back({l + "self_attn.q_proj." + kind, ours, 0, q});
        out.push_back({l + "self_attn.k_proj." + kind, ours, q, kv});
        out.push_back({l + "self_attn.v_proj." + kind, ours, q + kv, kv});
      }
      if (weight || biases.out) out.push_back({l + "self_attn.o_proj." + kind, b + "attn.c_proj." + kind});
      if (weight || biases.mlp) {
        out.push_back({l + "mlp.gate_proj." + kind, b + "mlp.c_fc." + kind, 0, h});
        out.push_back({l + "mlp.up_proj." + kind, b + "mlp.c_fc." + kind, h, h});
        out.push_back({l + "mlp.down_proj." + kind, b + "mlp.c_proj." + kind});
      }
    }
    out.push_back({l + "input_layernorm.weight", b + "ln_1.weight"});
    out.push_back({l + "post_attention_layernorm.weight", b + "ln_2.weight"});
  }
  out.push_back({"model.norm.weight", "transformer.ln_f.weight"});
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", "lm_head.weight"});
  return out;
}

std::string llama_layout_canonical_name(const std::string& name) {
  return name.ends_with("rotary_emb.inv_freq") ? "" : name;
}

json llama_layout_config(const ModelSettings& m, const char* class_name, const char* model_type) {
  json c;
  c["architectures"] = json::array({class_name});
  c["model_type"] = model_type;
  c["vocab_size"] = m.vocab_size;
  c["hidden_size"] = m.d_model;
  c["intermediate_size"] = mlp_hidden(m);
  c["num_hidden_layers"] = m.n_layer;
  c["num_attention_heads"] = m.n_head;
  c["num_key_value_heads"] = m.kv_heads();
  c["head_dim"] = m.head_width();
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = m.position_limit();  // rotary positions have no table
  c["rms_norm_eps"] = m.norm_eps;
  // transformers 5 reads rope_parameters, 4.x rope_theta and rope_scaling.
  json rope = {{"rope_type", rope_type_name(m.rope_scaling.type)}, {"rope_theta", m.rope_theta}};
  const RopeScalingSettings& s = m.rope_scaling;
  if (s.enabled()) rope["factor"] = s.factor;
  if (s.type == RopeScalingType::kLlama3) {
    rope["low_freq_factor"] = s.low_freq_factor;
    rope["high_freq_factor"] = s.high_freq_factor;
    rope["original_max_position_embeddings"] = s.original_max_positions;
  }
  if (s.type == RopeScalingType::kYarn) {
    rope["original_max_position_embeddings"] = s.original_max_positions;
    rope["beta_fast"] = s.beta_fast;
    rope["beta_slow"] = s.beta_slow;
    if (s.attention_factor > 0) rope["attention_factor"] = s.attention_factor;
    rope["truncate"] = s.truncate;
  }
  c["rope_theta"] = m.rope_theta;
  c["rope_parameters"] = rope;
  if (s.enabled()) {
    json legacy = rope;
    legacy.erase("rope_theta");
    c["rope_scaling"] = legacy;
  }
  c["attention_dropout"] = m.dropout;
  c["initializer_range"] = 0.02;
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["bos_token_id"] = gpt2_eot_id(m);
  c["eos_token_id"] = gpt2_eot_id(m);
  c["use_cache"] = true;
  return c;
}

void import_llama_layout_config(HfConfigReader& r) {
  ModelSettings& m = r.settings();
  const nlohmann::json& c = r.config();
  r.take_int("vocab_size", "model.vocab_size", m.vocab_size);
  r.take_int("hidden_size", "model.d_model", m.d_model);
  r.take_int("num_hidden_layers", "model.n_layer", m.n_layer);
  r.take_int("num_attention_heads", "model.n_head", m.n_head);
  const int64_t heads = r.int_or("num_attention_heads", m.n_head), hidden = r.int_or("hidden_size", m.d_model);
  r.take_int("num_key_value_heads", "model.n_kv_head", m.n_kv_head, heads, m.kv_heads());
  r.take_int("intermediate_size", "model.mlp_width", m.mlp_width, {}, mlp_hidden(m));
  if (heads > 0) r.take_int("head_dim", "model.head_dim", m.head_dim, hidden / heads, m.head_width());
  r.take_float("rms_norm_eps", "model.norm_eps", m.norm_eps, 1e-6);
  // rope_theta: transformers 5 keeps it in rope_parameters, 4.x at the top.
  const nlohmann::json& params = c.value("rope_parameters", nlohmann::json());
  if (params.is_object() && params.contains("rope_theta")) {
    HfConfigReader p = r.nested(params, "rope_parameters");
    p.take_float("rope_theta", "model.rope_theta", m.rope_theta);
    r.merge(p);
  } else {
    r.take_float("rope_theta", "model.rope_theta", m.rope_theta, 10000.0);
  }
  import_rope_scaling(r);
  if (r.has("partial_rotary_factor") && c["partial_rotary_factor"] != 1.0)
    r.refuse("has partial_rotary_factor " + c["partial_rotary_factor"].dump() +
                 ": gputrain rotates every dimension of a head",
             "init from a model that rotates whole heads");
  // A model whose limit is auto (seq_len) takes any limit at least seq_len; limit_seq_len checks that.
  r.take_int("max_position_embeddings", "model.max_positions", m.max_positions, 2048,
             m.max_positions > 0 ? m.max_positions : r.int_or("max_position_embeddings", 2048));
  r.limit_seq_len(m.position_limit(), "max_position_embeddings " + std::to_string(m.position_limit()));
  r.take_bool("tie_word_embeddings", "model.tie_embeddings", m.tie_embeddings, false);
  r.default_bool("model.bias", m.bias, false);
  if (r.has("hidden_act") && c["hidden_act"] != "silu")
    r.refuse("has hidden_act " + c["hidden_act"].dump() + "; gputrain's SwiGLU MLP uses silu",
             "init from a model with hidden_act silu");
}

int64_t llama_mlp_width(const ModelSettings& m) {
  const auto two_thirds =
      static_cast<int64_t>(std::ceil(2.0 * m.mlp_ratio * static_cast<double>(m.d_model) / 3.0 - 1e-9));
  return (two_thirds + 63) / 64 * 64;
}

void check_llama_layout(const ModelSettings& m, std::vector<KeyProblem>& problems) {
  if ((m.head_dim > 0 || m.d_model % m.n_head == 0) && m.head_width() % 2 != 0)
    problems.push_back({m.head_dim > 0 ? "model.head_dim" : "model.n_head",
                        "gives a head dimension of " + std::to_string(m.head_width()) +
                            ", but rotary position embeddings rotate pairs of dimensions and need an even one",
                        "choose an even head width (d_model / n_head, or model.head_dim)"});
  if (m.max_positions > 0 && m.seq_len > m.max_positions)
    problems.push_back({"model.seq_len",
                        "(" + std::to_string(m.seq_len) + ") is longer than model.max_positions (" +
                            std::to_string(m.max_positions) + "), the positions the model was made for",
                        "lower model.seq_len, or raise model.max_positions (with model.rope_scaling to stretch "
                        "the rotary positions)"});
  const RopeScalingSettings& s = m.rope_scaling;
  if ((s.type == RopeScalingType::kLlama3 || s.type == RopeScalingType::kYarn) && s.original_max_positions == 0)
    problems.push_back({"model.rope_scaling.original_max_positions",
                        "is needed by rope scaling type llama3 and yarn (the pretraining context)",
                        "set it (config.json's original_max_position_embeddings)"});
  if (s.type == RopeScalingType::kLlama3 && s.high_freq_factor <= s.low_freq_factor)
    problems.push_back({"model.rope_scaling.high_freq_factor", "must be above low_freq_factor",
                        "use Llama 3.1's values: low 1, high 4"});
}

}  // namespace gputrain
