#include "model/gpt_shapes.h"

#include <algorithm>

#include "model/architecture.h"
#include "model/hf_tensor.h"
#include "model/lora.h"

namespace gputrain {

std::vector<ParamShape> gpt_parameter_shapes(const ModelSettings& m) {
  const Architecture& arch = architecture(m);
  const int64_t d = m.d_model, h = mlp_hidden(m), V = m.padded_vocab();
  std::vector<ParamShape> out = {{"transformer.wte.weight", {V, d}}};
  if (arch.positions == PositionKind::kLearned) out.push_back({"transformer.wpe.weight", {m.seq_len, d}});
  auto targeted = [&](LoraTarget t) {
    return m.lora.rank > 0 && std::find(m.lora.targets.begin(), m.lora.targets.end(), t) != m.lora.targets.end();
  };
  // LoRA's adapters follow the weights (registration order) of the layers they adapt.
  auto linear = [&](const std::string& name, int64_t in, int64_t outf, bool bias, bool adapted) {
    out.push_back({name + ".weight", {outf, in}});
    if (bias) out.push_back({name + ".bias", {outf}});
    if (adapted) {
      out.push_back({name + ".lora_A", {m.lora.rank, in}});
      out.push_back({name + ".lora_B", {outf, m.lora.rank}});
    }
  };
  auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {d}});
    if (arch.norm_has_bias()) out.push_back({name + ".bias", {d}});  // RMSNorm has a scale only
  };
  const LinearBiases biases = linear_biases(m);
  auto mlp = [&](const std::string& name, bool adaptable) {
    linear(name + ".c_fc", d, arch.mlp_fc_rows(h), biases.mlp, adaptable && targeted(LoraTarget::kMlpUp));
    linear(name + ".c_proj", h, d, biases.mlp, adaptable && targeted(LoraTarget::kMlpDown));
  };
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    norm(b + "ln_1");
    linear(b + "attn.c_attn", d, m.q_width() + 2 * m.kv_width(), biases.qkv, targeted(LoraTarget::kQkv));
    linear(b + "attn.c_proj", m.q_width(), d, biases.out, targeted(LoraTarget::kProj));
    norm(b + "ln_2");
    if (m.moe.is_moe_block(l)) {
      linear(b + "mlp.router", d, m.moe.experts, false, false);
      for (int64_t e = 0; e < m.moe.experts; ++e) mlp(b + "mlp.experts." + std::to_string(e), false);
    } else {
      mlp(b + "mlp", true);
    }
  }
  norm("transformer.ln_f");
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", {V, d}});
  if (m.lora.rank > 0)
    for (auto& p : out) p.trainable = is_lora_parameter(p.name);
  return out;
}

namespace {

// Each of our weights that holds several Hugging Face matrices, with each one's rows in order; a
// mixture layer's experts are not listed (they are the dense MLP's shape).
std::map<std::string, std::vector<int64_t>> dense_fused_rows(const ModelSettings& m) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> bands;  // (row_offset, rows) per our weight
  for (const HfTensor& t : architecture(m).hf.tensors(m))
    if (t.rows > 0 && t.ours.ends_with(".weight")) bands[t.ours].push_back({t.row_offset, t.rows});
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& [weight, b] : bands) {
    if (b.size() < 2) continue;  // one band: a vocabulary matrix's real rows, not a fusion
    std::sort(b.begin(), b.end());
    std::vector<int64_t> rows;
    for (const auto& [offset, n] : b) rows.push_back(n);
    out[weight] = rows;
  }
  return out;
}

const std::string kMlpFc = ".mlp.c_fc.weight";

}  // namespace

std::map<std::string, std::vector<int64_t>> fused_matrix_rows(const ModelSettings& m) {
  std::map<std::string, std::vector<int64_t>> out;
  auto add = [&](const std::string& weight, const std::vector<int64_t>& rows) {
    out[weight] = rows;
    out[weight.substr(0, weight.size() - std::string("weight").size()) + "lora_B"] = rows;
  };
  for (const auto& [weight, rows] : dense_fused_rows(m)) {
    add(weight, rows);
    if (weight.ends_with(kMlpFc))  // a mixture layer's experts are the dense MLP's shape
      for (int64_t e = 0; e < m.moe.experts; ++e)
        add(weight.substr(0, weight.size() - kMlpFc.size()) + ".mlp.experts." + std::to_string(e) + ".c_fc.weight",
            rows);
  }
  return out;
}

std::vector<int64_t> fused_rows_of(const ModelSettings& m, const std::string& weight) {
  // An expert's c_fc ("transformer.h.1.mlp.experts.3.c_fc.weight") is banded as its block's dense one.
  std::string dense = weight;
  const std::string experts = ".mlp.experts.";
  if (const size_t at = weight.find(experts); at != std::string::npos && weight.ends_with(".c_fc.weight"))
    dense = weight.substr(0, at) + kMlpFc;
  const std::map<std::string, std::vector<int64_t>> fused = dense_fused_rows(m);
  const auto it = fused.find(dense);
  return it == fused.end() ? std::vector<int64_t>{} : it->second;
}

int64_t unit_of_parameter(const std::string& name, int64_t n_layer) {
  const std::string blocks = "transformer.h.";
  if (name.rfind("transformer.wte.", 0) == 0 || name.rfind("transformer.wpe.", 0) == 0) return 0;
  if (name.rfind(blocks, 0) == 0) return 1 + std::stoll(name.substr(blocks.size()));
  return n_layer + 1;
}

int64_t moe_layer_count(const ModelSettings& m) {
  int64_t layers = 0;
  for (int64_t i = 0; i < m.n_layer; ++i) layers += m.moe.is_moe_block(i) ? 1 : 0;
  return layers;
}

double active_parameters(const ModelSettings& m) {
  double n = 0;
  for (const ParamShape& p : gpt_parameter_shapes(m)) {
    if (p.name == "transformer.wpe.weight") continue;
    double count = static_cast<double>(p.numel());
    // Each expert's weights serve top_k / experts of the tokens.
    if (p.name.find(".experts.") != std::string::npos)
      count *= static_cast<double>(m.moe.top_k) / static_cast<double>(m.moe.experts);
    n += count;
  }
  return n;
}

}  // namespace gputrain
