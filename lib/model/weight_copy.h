// bf16 mixed precision's weight copies, as the model sees them. A Linear (or
// the tied output head) may hold a bf16 copy of its fp32 weight that the
// optimizer keeps equal to the weight rounded to nearest
// (train/weight_copies.h): what autocast's cast of the weight would make.
// Under autocast to bf16 the product then reads the copy and autocast has
// nothing to cast, which saves a read of the fp32 weight and a write of its
// bf16 cast in every forward (every micro-batch's). The gradient still
// reaches the fp32 weight, cast to fp32 as the cast's backward would.
#pragma once
#include <torch/types.h>

namespace gputrain {

// `copy` standing in for `weight` where autocast to copy's dtype is on for
// weight's device; otherwise (no copy, no autocast, fp16 autocast) `weight`.
torch::Tensor autocast_weight(const torch::Tensor& weight, const torch::Tensor& copy);

}  // namespace gputrain
