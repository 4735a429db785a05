// The GPT's parameters (names and shapes, in registration order; LoRA
// adapters and mixture-of-experts layers included) computed from the settings alone: the memory plan and
// optimizer-state estimates use it without building a model. A test checks it against the real module.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct ParamShape {
  std::string name;
  std::vector<int64_t> sizes;
  bool trainable = true;  // false: frozen under LoRA (no gradient, no optimizer state)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

std::vector<ParamShape> gpt_parameter_shapes(const ModelSettings& m);

// The Hugging Face layout's matrices that one parameter of ours holds as bands of rows, by our name:
// each band's rows, in order (Llama's q, k and v in attn.c_attn; gate and up in a SwiGLU c_fc, each
// expert's too, as Mixtral's w1 and w3; a LoRA lora_B as its weight). A parameter not listed is one
// matrix (GPT-2's c_attn is one Conv1D). For optimizers that treat each matrix alone (Muon).
std::map<std::string, std::vector<int64_t>> fused_matrix_rows(const ModelSettings& m);
// The same for one weight (empty: one matrix), without listing every parameter's: a mixture of many
// experts asks it for each of its Linears (QLoRA's quantization, the memory plan).
std::vector<int64_t> fused_rows_of(const ModelSettings& m, const std::string& weight);

// The unit (model/gpt.h UnitHooks) parameter `name` belongs to: 0 the embeddings (wte, wpe),
// 1 + i block i, n_layer + 1 the head (ln_f, lm_head).
int64_t unit_of_parameter(const std::string& name, int64_t n_layer);

// How many blocks are mixture-of-experts layers (model.moe.every).
int64_t moe_layer_count(const ModelSettings& m);

// Parameters that take part in one token's matrix products: all but the
// position table and, in each mixture layer, the experts a token is not routed to.
double active_parameters(const ModelSettings& m);

}  // namespace gputrain
