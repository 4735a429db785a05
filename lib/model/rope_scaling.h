// Rotary frequencies with Hugging Face's rope scaling (transformers' modeling_rope_utils): the
// inverse frequencies a head's dimension pairs rotate by, and the factor cos and sin are scaled by,
// for model.rope_scaling's type (none, linear, dynamic, llama3, yarn).
#pragma once
#include <torch/types.h>

#include "config/settings.h"

namespace gputrain {

struct RotaryFrequencies {
  torch::Tensor inverse;         // [head_dim / 2] float64
  double attention_scale = 1.0;  // cos and sin are multiplied by it (yarn)
};

// The frequencies for a forward pass of `T` positions: only dynamic scaling depends on T (its base
// grows once T passes model.max_positions, as transformers recomputes it for a longer input).
RotaryFrequencies rotary_frequencies(int64_t head_dim, double theta, const RopeScalingSettings& scaling,
                                     int64_t max_positions, int64_t T);

// Whether the frequencies differ between lengths T (dynamic scaling past max_positions).
bool rotary_depends_on_length(const RopeScalingSettings& scaling, int64_t max_positions, int64_t T);

}  // namespace gputrain
