#include "model/gpt_shapes.h"

namespace gputrain {

std::vector<ParamShape> gpt_parameter_shapes(const ModelSettings& m) {
  const int64_t d = m.d_model, h = m.mlp_hidden(), V = m.padded_vocab();
  const bool llama = m.arch == ModelArch::kLlama;
  std::vector<ParamShape> out = {{"transformer.wte.weight", {V, d}}};
  if (!llama) out.push_back({"transformer.wpe.weight", {m.seq_len, d}});
  auto linear = [&](const std::string& name, int64_t in, int64_t outf) {
    out.push_back({name + ".weight", {outf, in}});
    if (m.bias) out.push_back({name + ".bias", {outf}});
  };
  auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {d}});
    if (!llama) out.push_back({name + ".bias", {d}});  // RMSNorm has a scale only
  };
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    norm(b + "ln_1");
    linear(b + "attn.c_attn", d, d + 2 * m.kv_width());
    linear(b + "attn.c_proj", d, d);
    norm(b + "ln_2");
    linear(b + "mlp.c_fc", d, llama ? 2 * h : h);  // SwiGLU: gate and up
    linear(b + "mlp.c_proj", h, d);
  }
  norm("transformer.ln_f");
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", {V, d}});
  return out;
}

}  // namespace gputrain
