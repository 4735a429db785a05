// GPT-2 (model.arch: gpt): pre-LayerNorm blocks, learned positions, a GELU (tanh) MLP of
// mlp_ratio x d_model, Linear biases and tied embeddings.
//
// Hugging Face GPT2LMHeadModel: our parameter names are GPT-2's already (model/gpt.h); what differs:
//  - attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are Conv1D in GPT-2, whose weight is
//    [in, out]; ours are Linear, [out, in]: transposed.
//  - GPT-2 always has Linear biases: model.bias: false exports zeros, and imports only biases
//    that are all zero.
//  - lm_head.weight is left out when embeddings are tied (save_pretrained does the same) and
//    written when they are not.
//  - A GPT2Model checkpoint (no "transformer." prefix) and the attention-mask buffers of older
//    files (attn.bias, attn.masked_bias) are accepted.
#include <cmath>

#include "model/architecture.h"
#include "model/hf_mapping.h"

namespace gputrain {
namespace {
namespace gpt2 {  // named: a unity build puts the module's files in one translation unit

using json = nlohmann::ordered_json;

std::vector<HfTensor> tensors(const ModelSettings& m) {
  std::vector<HfTensor> out = {{"transformer.wte.weight", "transformer.wte.weight"},
                               {"transformer.wpe.weight", "transformer.wpe.weight"}};
  const int64_t d = m.d_model;
  auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", name + ".weight"});
    out.push_back({name + ".bias", name + ".bias"});
  };
  // A Conv1D layer: its weight transposed, its bias ours or (model.bias: false) zeros of `width`.
  auto conv1d = [&](const std::string& name, int64_t width) {
    out.push_back({name + ".weight", name + ".weight", 0, 0, /*transposed=*/true});
    if (m.bias) out.push_back({name + ".bias", name + ".bias"});
    else out.push_back({name + ".bias", "", 0, 0, false, {width}});
  };
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    norm(b + "ln_1");
    conv1d(b + "attn.c_attn", 3 * d);
    conv1d(b + "attn.c_proj", d);
    norm(b + "ln_2");
    conv1d(b + "mlp.c_fc", mlp_hidden(m));
    conv1d(b + "mlp.c_proj", d);
  }
  norm("transformer.ln_f");
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", "lm_head.weight"});
  return out;
}

std::string canonical_name(const std::string& name) {
  if (name.ends_with(".attn.masked_bias") || name.ends_with(".attn.bias")) return "";  // mask buffers
  if (name.starts_with("transformer.") || name == "lm_head.weight") return name;
  return "transformer." + name;  // a GPT2Model checkpoint
}

json config(const ModelSettings& m) {
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
  return c;
}

void import_config(HfConfigReader& r) {
  ModelSettings& m = r.settings();
  const nlohmann::json& c = r.config();
  r.take_int("vocab_size", "model.vocab_size", m.vocab_size);
  r.take_int("n_embd", "model.d_model", m.d_model);
  r.take_int("n_layer", "model.n_layer", m.n_layer);
  r.take_int("n_head", "model.n_head", m.n_head);
  const int64_t d = r.int_or("n_embd", m.d_model);
  r.take_int("n_inner", "model.mlp_width", m.mlp_width, 4 * d, mlp_hidden(m));
  r.take_float("layer_norm_epsilon", "model.norm_eps", m.norm_eps, 1e-5);
  r.take_bool("tie_word_embeddings", "model.tie_embeddings", m.tie_embeddings, true);
  r.default_bool("model.bias", m.bias, true);
  const int64_t positions = r.int_or("n_positions", 1024);
  r.limit_seq_len(positions, "n_positions " + std::to_string(positions));
  if (r.has("activation_function") && c["activation_function"] != "gelu_new" &&
      c["activation_function"] != "gelu_pytorch_tanh")
    r.refuse("has activation_function " + c["activation_function"].dump() +
                 "; gputrain's GPT uses GELU with the tanh approximation (gelu_new)",
             "init from a GPT-2 model trained with gelu_new");
  if (r.has("scale_attn_by_inverse_layer_idx") && c["scale_attn_by_inverse_layer_idx"] == true)
    r.refuse("has scale_attn_by_inverse_layer_idx true, which gputrain's attention does not do",
             "init from a GPT-2 model without it");
}

LinearBiases biases(const ModelSettings& m) { return {m.bias, m.bias, m.bias}; }

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
  // The keys of the rotary architectures mean nothing to GPT-2: refused, never ignored.
  const std::vector<std::pair<bool, const char*>> rotary_only = {
      {m.head_dim > 0 && m.head_dim * m.n_head != m.d_model, "model.head_dim"},
      {m.max_positions > 0, "model.max_positions"},
      {m.sliding_window > 0, "model.sliding_window"},
      {m.rope_scaling.enabled(), "model.rope_scaling.type"},
      {m.attention_bias != Toggle::kAuto, "model.attention_bias"},
      {m.mlp_bias != Toggle::kAuto, "model.mlp_bias"}};
  for (const auto& [set, key] : rotary_only)
    if (set)
      problems.push_back({key,
                          "is not part of arch gpt (GPT-2: d_model / n_head wide heads, learned positions "
                          "of seq_len, model.bias for every Linear)",
                          std::string("remove ") + key + ", or use model.arch: llama"});
}

}  // namespace gpt2
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
    .mlp_width_from_ratio = gpt2::mlp_width,
    .check = gpt2::check,
    .biases = gpt2::biases,
    .hf = {.model_type = "gpt2",
           .class_name = "GPT2LMHeadModel",
           .family = "GPT-2",
           .tensors = gpt2::tensors,
           .canonical_name = gpt2::canonical_name,
           .config = gpt2::config,
           .import_config = gpt2::import_config},
};

}  // namespace gputrain
