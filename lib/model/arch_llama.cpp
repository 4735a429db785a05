// Llama (model.arch: llama; Llama 2, 3 and 3.1-3.3, and any LlamaForCausalLM): pre-RMSNorm blocks,
// rotary positions (with Llama 3.1's rope scaling, or linear, dynamic or yarn), a SwiGLU MLP,
// grouped-query attention (model.n_kv_head), and by default no Linear biases (attention_bias and
// mlp_bias may add them) and an untied output head (Llama 3.2 ties it). The Hugging Face layout is
// model/hf_llama_layout.h's.
#include "model/architecture.h"
#include "model/hf_llama_layout.h"

namespace gputrain {
namespace {
namespace llama {  // named: a unity build puts the module's files in one translation unit

nlohmann::ordered_json config(const ModelSettings& m) {
  auto c = llama_layout_config(m, "LlamaForCausalLM", "llama");
  c["attention_bias"] = m.attention_biased();
  c["mlp_bias"] = m.mlp_biased();
  return c;
}

void import_config(HfConfigReader& r) {
  import_llama_layout_config(r);
  ModelSettings& m = r.settings();
  r.take_switch("attention_bias", "model.attention_bias", m.attention_bias, false, m.attention_biased());
  r.take_switch("mlp_bias", "model.mlp_bias", m.mlp_bias, false, m.mlp_biased());
}

LinearBiases biases(const ModelSettings& m) { return {m.attention_biased(), m.attention_biased(), m.mlp_biased()}; }

void check(const ModelSettings& m, std::vector<KeyProblem>& problems) {
  check_llama_layout(m, problems);
  if (m.sliding_window > 0)
    problems.push_back({"model.sliding_window", "is part of arch mistral; Llama attends to every earlier position",
                        "remove model.sliding_window, or set model.arch: mistral"});
}

}  // namespace llama
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
    .mlp_width_from_ratio = llama_mlp_width,
    .check = llama::check,
    .biases = llama::biases,
    .hf = {.model_type = "llama",
           .class_name = "LlamaForCausalLM",
           .family = "Llama",
           .tensors = llama_layout_tensors,
           .canonical_name = llama_layout_canonical_name,
           .config = llama::config,
           .import_config = llama::import_config},
};

}  // namespace gputrain
