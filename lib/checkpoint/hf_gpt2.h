// Hugging Face GPT-2 interop: GPT2LMHeadModel's state dict and config.json.
// Our parameter names are GPT-2's already (model/gpt.h); what differs:
//  - attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are Conv1D in GPT-2,
//    whose weight is [in, out]; ours are Linear, [out, in]: transposed.
//  - GPT-2 has vocab_size embedding rows; ours may be padded
//    (model.pad_vocab_to_multiple_of): the padding rows are cut on export and
//    keep their own initialization on import.
//  - GPT-2 always has Linear biases: model.bias: false exports zeros, and
//    imports only biases that are all zero.
//  - lm_head.weight is left out when embeddings are tied (save_pretrained
//    does the same) and written when they are not.
//  - A GPT2Model checkpoint (no "transformer." prefix) and the attention-mask
//    buffers of older files (attn.bias, attn.masked_bias) are accepted.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/settings.h"

namespace gputrain {

// Our weights (module_weights of a Gpt) as GPT2LMHeadModel's, in float32.
std::vector<NamedTensor> to_hf_gpt2(const std::vector<NamedTensor>& ours, const ModelSettings& m);

// config.json for GPT2LMHeadModel with the shapes of `m`.
nlohmann::ordered_json hf_gpt2_config(const ModelSettings& m);

// GPT-2 weights `hf` (from `source`, for messages) as ours for model `m`;
// `current` (the model's own weights) fills rows GPT-2 does not have. A
// config.json that disagrees with `m`, or weights of other shapes, are a
// DataError naming the key and the recipe key to change.
std::vector<NamedTensor> from_hf_gpt2(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source);

}  // namespace gputrain
