// Qwen2 and Qwen2.5 (model.arch: qwen2; Qwen2ForCausalLM): Llama's blocks with biases on the q, k
// and v projections and none elsewhere (fixed, as in transformers' Qwen2Attention), and tied
// embeddings where config.json says so (the small Qwen2.5 models). The Hugging Face layout is
// model/hf_llama_layout.h's. Qwen2's optional sliding window (use_sliding_window, off in every
// released model) is refused.
#include "model/architecture.h"
#include "model/hf_llama_layout.h"

namespace gputrain {
namespace {
namespace qwen2 {  // named: a unity build puts the module's files in one translation unit

nlohmann::ordered_json config(const ModelSettings& m) {
  auto c = llama_layout_config(m, "Qwen2ForCausalLM", "qwen2");
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = m.n_layer;
  return c;
}

void import_config(HfConfigReader& r) {
  import_llama_layout_config(r);
  if (r.has("use_sliding_window") && r.config()["use_sliding_window"] == true)
    r.refuse("has use_sliding_window true: Qwen2's per-layer sliding window is not implemented in gputrain",
             "init from a Qwen2 model with use_sliding_window false (every released Qwen2 and Qwen2.5 model)");
}

LinearBiases biases(const ModelSettings&) { return {true, false, false}; }

void check(const ModelSettings& m, std::vector<KeyProblem>& problems) {
  check_llama_layout(m, problems);
  if (m.attention_bias != Toggle::kAuto || m.mlp_bias != Toggle::kAuto || m.bias)
    problems.push_back({m.attention_bias != Toggle::kAuto ? "model.attention_bias"
                        : m.mlp_bias != Toggle::kAuto     ? "model.mlp_bias"
                                                          : "model.bias",
                        "is set, but qwen2's biases are fixed: q, k and v have them, the output projection and the "
                        "MLP do not",
                        "leave model.bias, attention_bias and mlp_bias out of the recipe, or use model.arch: llama"});
  if (m.sliding_window > 0)
    problems.push_back({"model.sliding_window", "is not implemented for qwen2 (its window applies per layer)",
                        "remove it, or use model.arch: mistral"});
}

}  // namespace qwen2
}  // namespace

extern const Architecture kQwen2Architecture = {
    .id = ModelArch::kQwen2,
    .name = "qwen2",
    .display_name = "Qwen2",
    .norm = NormKind::kRmsNorm,
    .mlp = MlpKind::kSwiGlu,
    .positions = PositionKind::kRotary,
    .default_bias = false,
    .default_tie_embeddings = false,
    .mlp_width_from_ratio = llama_mlp_width,
    .check = qwen2::check,
    .biases = qwen2::biases,
    .hf = {.model_type = "qwen2",
           .class_name = "Qwen2ForCausalLM",
           .family = "Qwen2",
           .tensors = llama_layout_tensors,
           .canonical_name = llama_layout_canonical_name,
           .config = qwen2::config,
           .import_config = qwen2::import_config},
};

}  // namespace gputrain
