#include "checkpoint/hf_gpt2.h"

#include <ATen/ATen.h>

#include <map>

#include "util/error.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT-2's Conv1D layers, whose weights are stored [in, out].
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
         ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
}

bool is_vocab_matrix(const std::string& name) {
  return name == "transformer.wte.weight" || name == "lm_head.weight";
}

// The Linear biases GPT-2 always has, with their sizes.
std::vector<std::pair<std::string, int64_t>> linear_biases(const ModelSettings& m) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    out.push_back({b + "attn.c_attn.bias", 3 * m.d_model});
    out.push_back({b + "attn.c_proj.bias", m.d_model});
    out.push_back({b + "mlp.c_fc.bias", m.mlp_hidden()});
    out.push_back({b + "mlp.c_proj.bias", m.d_model});
  }
  return out;
}

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

std::vector<NamedTensor> to_hf_gpt2(const std::vector<NamedTensor>& ours, const ModelSettings& m) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : ours) {
    torch::Tensor w = t.detach().to(torch::kCPU, torch::kFloat);
    if (is_conv1d_weight(name)) w = w.t();
    if (is_vocab_matrix(name)) w = w.narrow(0, 0, m.vocab_size);  // padding rows are ours alone
    out.push_back({name, w.contiguous()});
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
  c["n_inner"] = m.mlp_hidden() == 4 * m.d_model ? json(nullptr) : json(m.mlp_hidden());
  c["activation_function"] = "gelu_new";  // GELU with the tanh approximation, as ours
  c["resid_pdrop"] = m.dropout;
  c["embd_pdrop"] = m.dropout;
  c["attn_pdrop"] = m.dropout;
  c["layer_norm_epsilon"] = 1e-5;
  c["initializer_range"] = 0.02;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = m.tie_embeddings;
  // GPT-2's end-of-text id, when the vocabulary has it.
  const json eot = m.vocab_size > 50256 ? json(50256) : json(nullptr);
  c["bos_token_id"] = eot;
  c["eos_token_id"] = eot;
  c["dtype"] = "float32";
  return c;
}

std::vector<NamedTensor> from_hf_gpt2(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source) {
  // config.json first: its numbers name the recipe key to change.
  const std::vector<std::tuple<const char*, const char*, int64_t>> shape_keys = {
      {"n_embd", "model.d_model", m.d_model}, {"n_layer", "model.n_layer", m.n_layer}, {"n_head", "model.n_head", m.n_head}};
  for (const auto& [key, recipe_key, ours] : shape_keys)
    if (config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() != ours)
      throw data_error(source + ": config.json has " + key + " " + config[key].dump() + " but " + recipe_key + " is " +
                       std::to_string(ours) + "\n    fix: set " + recipe_key + ": " + config[key].dump());
  if (config.contains("activation_function") && config["activation_function"].is_string()) {
    const std::string act = config["activation_function"];
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw data_error(source + ": config.json's activation_function is " + act +
                       "; gputrain's GPT uses GELU with the tanh approximation (gelu_new)" +
                       "\n    fix: init from a GPT-2 model trained with gelu_new");
  }
  if (config.contains("tie_word_embeddings") && config["tie_word_embeddings"].is_boolean() &&
      config["tie_word_embeddings"].get<bool>() != m.tie_embeddings)
    throw data_error(source + ": config.json has tie_word_embeddings " + config["tie_word_embeddings"].dump() +
                     "\n    fix: set model.tie_embeddings: " + config["tie_word_embeddings"].dump());

  std::map<std::string, torch::Tensor> given;
  bool prefixed = false;
  for (const auto& [name, t] : hf) prefixed = prefixed || name.rfind("transformer.", 0) == 0;
  for (const auto& [name, t] : hf) {
    // Mask buffers of older GPT-2 files, not weights.
    if (ends_with(name, ".attn.masked_bias") || (ends_with(name, ".attn.bias") && t.dim() == 4)) continue;
    const std::string key = prefixed || name == "lm_head.weight" ? name : "transformer." + name;
    given[key] = t;
  }
  if (m.tie_embeddings && given.count("lm_head.weight") && given.count("transformer.wte.weight") &&
      at::equal(given["lm_head.weight"], given["transformer.wte.weight"]))
    given.erase("lm_head.weight");  // a tied copy written out

  const std::string fix_shapes = "\n    fix: make model.* match the checkpoint's config.json (n_embd -> d_model, "
                                 "n_layer, n_head, n_inner -> mlp_ratio, n_positions >= seq_len, vocab_size)";
  std::vector<NamedTensor> out;
  for (const auto& [name, own] : current) {
    auto it = given.find(name);
    if (it == given.end())
      throw data_error(source + ": has no " + name + " (is it a GPT-2 checkpoint?)" + fix_shapes);
    torch::Tensor w = it->second.to(torch::kFloat);
    given.erase(it);
    if (is_conv1d_weight(name)) w = w.t();
    torch::Tensor result;
    if (is_vocab_matrix(name) || name == "transformer.wpe.weight") {
      // Fewer rows than ours (padded vocabulary) keep our rows beyond them;
      // more positions than model.seq_len are cut (a shorter context).
      const bool positions = name == "transformer.wpe.weight";
      const bool fits = w.dim() == 2 && w.size(1) == own.size(1) &&
                        (positions ? w.size(0) >= own.size(0) : w.size(0) == m.vocab_size || w.size(0) == own.size(0));
      if (!fits)
        throw data_error(source + ": " + name + " is " + shape_str(it->second) + ", which does not fit " +
                         shape_str(own) + (positions ? " (model.seq_len positions)" : " (model.vocab_size rows)") +
                         fix_shapes);
      result = own.detach().to(torch::kCPU, torch::kFloat).clone();
      const int64_t rows = std::min(w.size(0), own.size(0));
      result.narrow(0, 0, rows).copy_(w.narrow(0, 0, rows));
    } else {
      if (w.sizes() != own.sizes())
        throw data_error(source + ": " + name + " is " + shape_str(it->second) + " there but " + shape_str(own) +
                         " in this model" + fix_shapes);
      result = w;
    }
    out.push_back({name, result});
  }
  if (!m.bias)
    for (const auto& [name, size] : linear_biases(m)) {
      auto it = given.find(name);
      if (it == given.end()) continue;
      if (at::any(it->second != 0).item<bool>())
        throw data_error(source + ": " + name + " is not zero, but model.bias is false" + "\n    fix: set model.bias: true");
      given.erase(it);
    }
  if (!given.empty()) {
    std::string extra;
    for (const auto& [name, _] : given) extra += (extra.empty() ? "" : ", ") + name;
    throw data_error(source + ": has weights this model does not: " + extra + fix_shapes);
  }
  return out;
}

}  // namespace gputrain
