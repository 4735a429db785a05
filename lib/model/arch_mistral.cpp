// Mistral (model.arch: mistral; MistralForCausalLM): Llama's blocks without biases and with
// model.sliding_window, honoured in attention: each position sees itself and the window - 1 before
// it (Mistral 7B v0.1's 4096; later versions have none). The Hugging Face layout is
// model/hf_llama_layout.h's.
#include "model/architecture.h"
#include "model/hf_llama_layout.h"

namespace gputrain {
namespace {
namespace mistral {  // named: a unity build puts the module's files in one translation unit

nlohmann::ordered_json config(const ModelSettings& m) {
  auto c = llama_layout_config(m, "MistralForCausalLM", "mistral");
  c["sliding_window"] = m.sliding_window > 0 ? nlohmann::ordered_json(m.sliding_window) : nullptr;
  return c;
}

void import_config(HfConfigReader& r) {
  import_llama_layout_config(r);
  ModelSettings& m = r.settings();
  r.take_int("sliding_window", "model.sliding_window", m.sliding_window, 0);
  r.set_switch("model.attention_bias", m.attention_bias, false, "no attention biases (MistralForCausalLM)",
               m.attention_biased());
  r.set_switch("model.mlp_bias", m.mlp_bias, false, "no MLP biases (MistralForCausalLM)", m.mlp_biased());
}

LinearBiases biases(const ModelSettings& m) { return {m.attention_biased(), m.attention_biased(), m.mlp_biased()}; }

}  // namespace mistral
}  // namespace

extern const Architecture kMistralArchitecture = {
    .id = ModelArch::kMistral,
    .name = "mistral",
    .display_name = "Mistral",
    .norm = NormKind::kRmsNorm,
    .mlp = MlpKind::kSwiGlu,
    .positions = PositionKind::kRotary,
    .default_bias = false,
    .default_tie_embeddings = false,
    .mlp_width_from_ratio = llama_mlp_width,
    .check = check_llama_layout,
    .biases = mistral::biases,
    .hf = {.model_type = "mistral",
           .class_name = "MistralForCausalLM",
           .family = "Mistral",
           .tensors = llama_layout_tensors,
           .canonical_name = llama_layout_canonical_name,
           .config = mistral::config,
           .import_config = mistral::import_config},
};

}  // namespace gputrain
