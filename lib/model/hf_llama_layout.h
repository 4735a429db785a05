// What Llama, Qwen2 and Mistral share (model/arch_llama.cpp, arch_qwen2.cpp, arch_mistral.cpp):
// the model (pre-RMSNorm blocks, rotary positions, SwiGLU MLP, grouped-query attention) and its
// Hugging Face layout, LlamaForCausalLM's names, which the three families' classes all use:
//  - transformer.wte -> model.embed_tokens, transformer.ln_f -> model.norm,
//    ln_1 / ln_2 -> input_layernorm / post_attention_layernorm;
//  - attn.c_attn's rows [q; k; v] -> self_attn.q_proj, k_proj, v_proj; attn.c_proj -> self_attn.o_proj;
//  - mlp.c_fc's rows [gate; up] -> mlp.gate_proj, up_proj; mlp.c_proj -> mlp.down_proj.
// Weights are Linear [out, in] on both sides, and our rotary embedding uses the same "rotate half"
// layout, so q and k need no permutation. lm_head.weight is left out when embeddings are tied.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/model_rules.h"
#include "config/settings.h"
#include "model/hf_config_reader.h"
#include "model/hf_tensor.h"

namespace gputrain {

std::vector<HfTensor> llama_layout_tensors(const ModelSettings& m);
std::string llama_layout_canonical_name(const std::string& name);  // drops rotary_emb.inv_freq buffers

// config.json's fields the three share, for `class_name` / `model_type`; each family adds its own.
nlohmann::ordered_json llama_layout_config(const ModelSettings& m, const char* class_name, const char* model_type);
// The shared fields of config.json as model.* keys (shapes, norm, rotary positions and their
// scaling, tied embeddings); each family reads its own besides.
void import_llama_layout_config(HfConfigReader& r);

// SwiGLU's width from mlp_ratio: 2/3 of mlp_ratio x d_model rounded up to a multiple of 64, as Llama.
int64_t llama_mlp_width(const ModelSettings& m);
// Rotary positions rotate pairs of dimensions: the head width must be even.
void check_llama_layout(const ModelSettings& m, std::vector<KeyProblem>& problems);

}  // namespace gputrain
