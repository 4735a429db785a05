// The GPT's parameters (names and shapes, in registration order; LoRA
// adapters and mixture-of-experts layers included) computed from the settings alone: the memory plan and
// optimizer-state estimates use it without building a model. A test checks it against the real module.
#pragma once
#include <cstdint>
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

// The unit (model/gpt.h UnitHooks) parameter `name` belongs to: 0 the embeddings (wte, wpe),
// 1 + i block i, n_layer + 1 the head (ln_f, lm_head).
int64_t unit_of_parameter(const std::string& name, int64_t n_layer);

// How many blocks are mixture-of-experts layers (model.moe.every).
int64_t moe_layer_count(const ModelSettings& m);

// Parameters that take part in one token's matrix products: all but the
// position table and, in each mixture layer, the experts a token is not routed to.
double active_parameters(const ModelSettings& m);

}  // namespace gputrain
