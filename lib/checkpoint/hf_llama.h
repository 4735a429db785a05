// Hugging Face Llama interop: LlamaForCausalLM's state dict and config.json
// for model.arch: llama. Our names are GPT-2's (model/gpt.h), so the mapping
// renames and splits:
//  - transformer.wte -> model.embed_tokens, transformer.ln_f -> model.norm,
//    ln_1 / ln_2 -> input_layernorm / post_attention_layernorm;
//  - attn.c_attn's rows [q; k; v] -> self_attn.q_proj, k_proj, v_proj;
//    attn.c_proj -> self_attn.o_proj;
//  - mlp.c_fc's rows [gate; up] -> mlp.gate_proj, up_proj; mlp.c_proj -> mlp.down_proj.
// Weights are Linear [out, in] on both sides, and our rotary embedding uses
// Hugging Face's "rotate half" layout, so q and k need no permutation. Padded
// vocabulary rows are cut on export and keep their values on import, as for
// GPT-2. lm_head.weight is left out when embeddings are tied.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/settings.h"

namespace gputrain {

// Our weights (module_weights of a llama Gpt) as LlamaForCausalLM's, in float32.
std::vector<NamedTensor> to_hf_llama(const std::vector<NamedTensor>& ours, const ModelSettings& m);

// config.json for LlamaForCausalLM with the shapes of `m`.
nlohmann::ordered_json hf_llama_config(const ModelSettings& m);

// Llama weights `hf` (from `source`, for messages) as ours for model `m`;
// `current` (the model's own weights) fills padded vocabulary rows. A
// config.json that disagrees with `m` (shapes, norm epsilon, rope theta,
// biases, tied head), rope scaling, or weights of other shapes are a
// DataError naming the key and the recipe key to change.
std::vector<NamedTensor> from_hf_llama(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                       const std::vector<NamedTensor>& current, const ModelSettings& m,
                                       const std::string& source);

}  // namespace gputrain
